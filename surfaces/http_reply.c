/* http_reply: every reply leaves through here, on the loop thread, once:
 * the body written at once when it fits (http_write_now), the request
 * counted for /metrics and written to the access log, and the drain told
 * when the last one is out. */
#include "surfaces/http_int.h"

/* ---- replies ---------------------------------------------------------- */

void http_count(struct surf_http *h, int route, int status, int64_t t0)
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

void http_alog_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    surf_http_access_flush(arg);
}

void http_access_line(struct surf_http *h, struct evhttp_request *req,
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
                  http_method_name(evhttp_request_get_command(req)), clean,
                  status, bytes, (double)(now - t0) / 1000.0,
                  http_route_label(h, route));
    if (h->alog.len >= ALOG_FLUSH)
        surf_http_access_flush(h);
}

static void free_ref(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    free(arg);
}

/* libevent wrote a whole reply to the socket. */
static void reply_written(struct evhttp_request *req, void *arg)
{
    struct surf_http *h = arg;
    http_conn_replied(h, req);
    h->unsent--;
    http_drain_check(h);
}

/* Sends data (malloc'd, taken) as the body; counts the request. The reply
 * goes out at once when it fits (http_write_now), so req may be freed on
 * return. */
void http_send_raw(struct surf_http *h, struct evhttp_request *req, int status,
                   const char *ctype, char *data, size_t len, int close,
                   int route, int64_t t0)
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
    http_access_line(h, req, status, len, route, t0);
    h->unsent++;
    http_conn_sent(h, req);
    evhttp_request_set_on_complete_cb(req, reply_written, h);
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evhttp_send_reply(req, status, NULL, buf); /* the standard phrase */
    if (buf)
        evbuffer_free(buf);
    http_count(h, route, status, t0);
    if (bev)
        http_write_now(bev); /* req may be freed from here on */
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

void http_send_error(struct surf_http *h, struct evhttp_request *req,
                     const struct fo_err *err, int close, int route, int64_t t0)
{
    size_t len = 0;
    char *t = error_text(err, &len);
    http_send_raw(h, req, surf_code_http(err->code), "application/json", t, len,
                  close, route, t0);
}

void http_send_errorf(struct surf_http *h, struct evhttp_request *req, int code,
                      const char *msg, int close, int route, int64_t t0)
{
    struct fo_err err;
    fo_err_set(&err, code, "%s", msg);
    http_send_error(h, req, &err, close, route, t0);
}

/* The result of a method as status + body text (for any thread). */
void http_result_text(int rc, const cJSON *out, const struct fo_err *err,
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
void http_drain_check(struct surf_http *h)
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
void http_finished(struct surf_http *h)
{
    h->inflight--;
    http_drain_check(h);
}

void http_write_now(struct bufferevent *bev)
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

void surf_http_reply(struct surf_http *h, struct evhttp_request *req,
                     int status, const char *ctype, char *body, size_t len,
                     int64_t t0)
{
    http_send_raw(h, req, status, ctype, body, len, 0, ROUTE_TLOG, t0);
    http_finished(h);
}

void surf_http_reply_error(struct surf_http *h, struct evhttp_request *req,
                           int code, const char *msg, int64_t t0)
{
    http_send_errorf(h, req, code, msg, 0, ROUTE_TLOG, t0);
    http_finished(h);
}

void surf_http_stream_start(struct surf_http *h, struct evhttp_request *req,
                            int status, const char *ctype, int64_t t0)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", ctype);
    evhttp_add_header(oh, "Cache-Control", "no-store");
    evhttp_add_header(oh, "X-Accel-Buffering", "no");
    evhttp_add_header(oh, "Connection", "close");
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev =
        evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    /* a model may think for longer than the idle timeout between chunks */
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &h->deadline_plain);
    evhttp_send_reply_start(req, status, NULL);
    http_count(h, ROUTE_TLOG, status, t0);
    http_access_line(h, req, status, 0, ROUTE_TLOG, t0);
}

int surf_http_stream_chunk(struct evhttp_request *req, struct evbuffer *data)
{
    if (!evhttp_request_get_connection(req))
        return -1;
    evhttp_send_reply_chunk(req, data);
    return 0;
}

void surf_http_stream_end(struct surf_http *h, struct evhttp_request *req)
{
    if (req)
        evhttp_send_reply_end(req); /* frees a request whose client left */
    http_finished(h);
}
