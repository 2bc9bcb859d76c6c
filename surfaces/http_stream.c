/* http_stream: GET /events on the wire: a chunked reply per subscriber of
 * the events tailer (surfaces/events.c), written with backpressure and
 * ended when the client leaves, the stream cannot go on or the server
 * drains. */
#include "surfaces/http_int.h"

#include <malloc.h>

static size_t stream_pending(void *arg);

/* The allocator keeps what a closed stream's buffers freed (up to
 * SURF_EVENTS_HIGH and more a stalled stream, in many small chains) in its
 * free lists, where it counts in the daemon's resident set for good:
 * malloc_trim hands the free pages back. It runs on a timer, after the
 * connection (whose buffers are freed once its close callback returns),
 * once for many streams closed together. */
void http_trim_memory(evutil_socket_t fd, short what, void *arg)
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
    http_finished(h);
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
void http_stream_end(void *arg)
{
    struct stream *st = arg;
    struct conn *c = http_conn_find(st->h, st->evcon);
    if (c)
        c->stream = NULL;
    evhttp_send_reply_end(st->req);
    stream_unlink(st);
}

/* The connection is going (http_conn_closed). When evhttp detached the request
 * from it (the peer hung up mid-reply), the request is ours to free;
 * otherwise the connection frees it. */
void http_stream_lost(struct stream *st)
{
    if (!evhttp_request_get_connection(st->req))
        evhttp_send_reply_end(st->req); /* frees a detached request */
    stream_unlink(st);
}

/* A GET /events whose filter is read on a worker (a run's request, the
 * kinds the ledger holds: reads of the ledger, so off the loop). */
struct stream_open {
    char *query;
    char *last; /* Last-Event-ID */
    struct surf_events_filter f;
    int rc;
    struct fo_err err;
};

static void stream_filter_work(struct job *j, struct surf_ctx *ctx)
{
    struct stream_open *o = j->arg;
    o->rc =
        ctx ? surf_events_filter_parse(ctx->ledger, o->query, o->last, &o->f,
                                       &o->err)
            : fo_err_set(&o->err, FO_E_UNAVAILABLE, "the worker has no ledger");
}

static int stream_begin(struct surf_http *h, struct evhttp_request *req,
                        const struct surf_events_filter *f, int64_t t0);

/* Loop: the filter was read; the stream starts, or the error is the
 * answer. */
static void stream_filter_done(struct job *j)
{
    struct surf_http *h = j->h;
    struct stream_open *o = j->arg;
    struct evhttp_request *req = j->req;
    int64_t t0 = j->t0;
    int kept = 0;
    if (o->rc != FO_OK)
        http_send_error(h, req, &o->err, 0, ROUTE_EVENTS, t0);
    else if (h->draining)
        http_send_errorf(h, req, FO_E_DRAINING, "the daemon is shutting down",
                         0, ROUTE_EVENTS, t0);
    else
        kept = stream_begin(h, req, &o->f, t0);
    free(o->query);
    free(o->last);
    http_job_free(j); /* and o */
    if (!kept)
        http_finished(h);
}

/* GET /events, past the auth check: 1 when in flight (the filter is read
 * on a worker, then the stream is open until stream_unlink, or the error
 * is answered), 0 when it was answered with an error. */
int http_stream_open(struct surf_http *h, struct evhttp_request *req,
                     const char *verb, int64_t t0)
{
    if (strcmp(verb, "GET") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET");
        http_send_errorf(h, req, FO_E_METHOD, "/events: use GET", 0,
                         ROUTE_EVENTS, t0);
        return 0;
    }
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (!h->events || !c) {
        http_send_errorf(h, req, FO_E_UNAVAILABLE,
                         "the event stream is not available here", 0,
                         ROUTE_EVENTS, t0);
        return 0;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    const char *last = evhttp_find_header(evhttp_request_get_input_headers(req),
                                          "Last-Event-ID");
    struct stream_open *o = calloc(1, sizeof(*o));
    struct job *j =
        o ? http_job_new(h, req, NULL, ROUTE_EVENTS, t0, NULL) : NULL;
    if (o) {
        o->query = query ? strdup(query) : NULL;
        o->last = last ? strdup(last) : NULL;
    }
    if (!j || (query && !o->query) || (last && !o->last)) {
        if (o) {
            free(o->query);
            free(o->last);
        }
        free(o);
        http_job_free(j);
        http_send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, ROUTE_EVENTS,
                         t0);
        return 0;
    }
    j->work = stream_filter_work;
    j->finish = stream_filter_done;
    j->arg = o;
    j->free_arg = 1;
    http_job_post(h, j);
    return 1;
}

/* Loop: the stream of a GET /events whose filter was read. 1 when open
 * (in flight until stream_unlink), 0 when answered with an error. */
static int stream_begin(struct surf_http *h, struct evhttp_request *req,
                        const struct surf_events_filter *filter, int64_t t0)
{
    struct fo_err err;
    struct surf_events_filter f = *filter;
    struct conn *c = http_conn_find(h, evhttp_request_get_connection(req));
    if (!c) { /* the client left meanwhile (this frees the request) */
        http_send_errorf(h, req, FO_E_UNAVAILABLE,
                         "the event stream is not available here", 0,
                         ROUTE_EVENTS, t0);
        return 0;
    }
    struct stream *st = calloc(1, sizeof(*st));
    if (st)
        st->tmp = evbuffer_new();
    if (!st || !st->tmp) {
        free(st);
        http_send_errorf(h, req, FO_E_NOMEM, "out of memory", 0, ROUTE_EVENTS,
                         t0);
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
    http_count(h, ROUTE_EVENTS, 200, t0);
    http_access_line(h, req, 200, 0, ROUTE_EVENTS, t0);
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
                                                 http_stream_end};
    st->sub = surf_events_subscribe(h->events, &f, &sink, st, &err);
    if (!st->sub) {
        char msg[300];
        int n = snprintf(msg, sizeof(msg),
                         "event: error\ndata: {\"error\":\"cannot start the "
                         "stream\"}\n\n");
        if (n > 0)
            stream_write(st, msg, (size_t)n);
        http_stream_end(st);
    }
    return 1;
}
