/* tlog_httpc: one non-blocking HTTP POST on the daemon's loop (see
 * tlog_httpc.h). Its end is judged from an event of its own, never inside
 * libevent's callback of the connection it frees. */
#include "daemon/tlog_httpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "ledger/fo_buf.h"

struct tlog_httpc {
    struct evhttp_connection *evcon;
    struct evhttp_request *req; /* until libevent is done with it */
    struct event *deadline, *fin;
    int ended;
    int status;
    int timeout_ms;
    struct fo_buf body;
    char why[160];
    tlog_httpc_done_fn done;
    void *arg;
};

/* The parts of url (scheme http, a host, no query or fragment). */
struct url_parts {
    char host[256];
    int port;
    char prefix[1024]; /* the path without its trailing '/', maybe "" */
};

static int url_split(const char *url, struct url_parts *u, struct fo_err *err)
{
    struct evhttp_uri *p = url ? evhttp_uri_parse(url) : NULL;
    int rc = FO_OK;
    if (!p)
        return fo_err_set(err, FO_E_INVALID, "url \"%s\": not a URL",
                          url ? url : "");
    const char *scheme = evhttp_uri_get_scheme(p);
    const char *host = evhttp_uri_get_host(p);
    const char *path = evhttp_uri_get_path(p);
    if (!scheme || strcmp(scheme, "http") != 0)
        rc = fo_err_set(err, FO_E_INVALID,
                        "url \"%s\": only http:// (put a local TLS proxy in "
                        "front of an https witness)",
                        url);
    else if (!host || !*host || strlen(host) >= sizeof(u->host))
        rc = fo_err_set(err, FO_E_INVALID, "url \"%s\": no host", url);
    else if (evhttp_uri_get_query(p) || evhttp_uri_get_fragment(p) ||
             evhttp_uri_get_userinfo(p))
        rc = fo_err_set(err, FO_E_INVALID,
                        "url \"%s\": a query, fragment or user name is not "
                        "taken",
                        url);
    else if (path && strlen(path) >= sizeof(u->prefix))
        rc = fo_err_set(err, FO_E_INVALID, "url \"%s\": path too long", url);
    if (!rc) {
        snprintf(u->host, sizeof(u->host), "%s", host);
        u->port = evhttp_uri_get_port(p) > 0 ? evhttp_uri_get_port(p) : 80;
        snprintf(u->prefix, sizeof(u->prefix), "%s", path ? path : "");
        size_t n = strlen(u->prefix);
        while (n > 0 && u->prefix[n - 1] == '/')
            u->prefix[--n] = '\0';
    }
    evhttp_uri_free(p);
    return rc;
}

int tlog_httpc_url_check(const char *url, struct fo_err *err)
{
    struct url_parts u;
    return url_split(url, &u, err);
}

static void release(struct tlog_httpc *r)
{
    if (r->deadline)
        event_free(r->deadline);
    if (r->fin)
        event_free(r->fin);
    if (r->evcon) /* frees any request still on it */
        evhttp_connection_free(r->evcon);
    fo_buf_release(&r->body);
    free(r);
}

/* From the request's own events only: tells, then frees. */
static void finish(struct tlog_httpc *r)
{
    if (r->done)
        r->done(r->arg, r->status, r->body.data ? r->body.data : "",
                r->body.len, r->why);
    release(r);
}

static void on_fin(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    finish(arg);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct tlog_httpc *r = arg;
    if (r->ended)
        return;
    const char *why = e == EVREQ_HTTP_TIMEOUT          ? "timed out"
                      : e == EVREQ_HTTP_EOF            ? "connection closed"
                      : e == EVREQ_HTTP_INVALID_HEADER ? "a malformed reply"
                      : e == EVREQ_HTTP_DATA_TOO_LONG  ? "a reply too long"
                                                       : "connection failed";
    snprintf(r->why, sizeof(r->why), "%s", why);
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct tlog_httpc *r = arg;
    if (r->ended)
        return;
    r->ended = 1;
    r->req = NULL; /* libevent frees it after this callback */
    r->status = req ? evhttp_request_get_response_code(req) : 0;
    if (r->status <= 0) {
        r->status = -1;
        if (!r->why[0])
            snprintf(r->why, sizeof(r->why), "no reply (refused or reset)");
    } else {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        if (n > TLOG_HTTPC_BODY_MAX)
            n = TLOG_HTTPC_BODY_MAX;
        if (fo_buf_reserve(&r->body, n + 1) == FO_OK) {
            evbuffer_remove(in, r->body.data, n);
            r->body.len = n;
            r->body.data[n] = '\0';
        }
    }
    event_del(r->deadline);
    event_active(r->fin, EV_TIMEOUT, 1);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tlog_httpc *r = arg;
    if (r->ended)
        return;
    r->ended = 1; /* the cancel's callbacks are ignored */
    r->status = -1;
    snprintf(r->why, sizeof(r->why), "no reply within %d ms", r->timeout_ms);
    struct evhttp_request *req = r->req;
    r->req = NULL;
    if (req)
        evhttp_cancel_request(req);
    finish(r);
}

int tlog_httpc_post(struct event_base *base, struct evdns_base *dns,
                    const char *url, const char *path, const char *ctype,
                    const char *body, size_t len, int timeout_ms,
                    tlog_httpc_done_fn done, void *arg, struct tlog_httpc **out,
                    struct fo_err *err)
{
    struct url_parts u;
    int rc = url_split(url, &u, err);
    if (rc)
        return rc;
    char full[2048];
    if (snprintf(full, sizeof(full), "%s%s", u.prefix, path) >=
        (int)sizeof(full))
        return fo_err_set(err, FO_E_INVALID, "url \"%s\": path too long", url);
    struct tlog_httpc *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    fo_buf_init(&r->body, TLOG_HTTPC_BODY_MAX + 1);
    r->done = done;
    r->arg = arg;
    r->timeout_ms = timeout_ms;
    r->deadline = evtimer_new(base, on_deadline, r);
    r->fin = event_new(base, -1, 0, on_fin, r);
    r->evcon =
        evhttp_connection_base_new(base, dns, u.host, (unsigned short)u.port);
    if (!r->deadline || !r->fin || !r->evcon)
        goto nomem;
    evhttp_connection_set_retries(r->evcon, 0);
    /* libevent's own timer is a backstop only: the deadline decides */
    evhttp_connection_set_timeout(r->evcon, timeout_ms / 1000 + 5);
    evhttp_connection_set_max_body_size(r->evcon, TLOG_HTTPC_BODY_MAX);
    evhttp_connection_set_max_headers_size(r->evcon, 16 * 1024);
    r->req = evhttp_request_new(on_done, r);
    if (!r->req)
        goto nomem;
    evhttp_request_set_error_cb(r->req, on_error);
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
    char cl[32], host[300];
    snprintf(cl, sizeof(cl), "%zu", len);
    if (u.port == 80)
        snprintf(host, sizeof(host), "%s", u.host);
    else
        snprintf(host, sizeof(host), "%s:%d", u.host, u.port);
    if (evhttp_add_header(h, "Host", host) ||
        evhttp_add_header(h, "Content-Type", ctype) ||
        evhttp_add_header(h, "User-Agent", "forum") ||
        evhttp_add_header(h, "Content-Length", cl) ||
        evbuffer_add(evhttp_request_get_output_buffer(r->req), body, len)) {
        evhttp_request_free(r->req);
        r->req = NULL;
        goto nomem;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (evtimer_add(r->deadline, &tv) != 0)
        goto nomem_req;
    if (evhttp_make_request(r->evcon, r->req, EVHTTP_REQ_POST, full) != 0) {
        r->req = NULL; /* libevent freed it */
        if (!r->ended) {
            r->ended = 1;
            r->status = -1;
            snprintf(r->why, sizeof(r->why), "cannot connect to %.100s:%d",
                     u.host, u.port);
            event_del(r->deadline);
            event_active(r->fin, EV_TIMEOUT, 1);
        }
    }
    *out = r;
    return FO_OK;
nomem_req:
    evhttp_request_free(r->req);
    r->req = NULL;
nomem:
    r->done = NULL;
    release(r);
    return fo_err_set(err, FO_E_NOMEM, NULL);
}

void tlog_httpc_cancel(struct tlog_httpc *r)
{
    if (!r)
        return;
    r->done = NULL;
    if (!r->ended) {
        r->ended = 1;
        struct evhttp_request *req = r->req;
        r->req = NULL;
        if (req)
            evhttp_cancel_request(req);
    }
    release(r);
}
