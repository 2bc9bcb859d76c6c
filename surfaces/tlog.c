/* tlog: GET /tlog/... and POST /add-checkpoint (see tlog.h). The data
 * comes from daemon/tlog.h: the checkpoint from memory, tiles from memory
 * or DIR/tlog, the witness's answers from its thread. */
#include "surfaces/tlog.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

#include "daemon/tlog.h"
#include "daemon/tlog_witness.h"
#include "ledger/fo_buf.h"
#include "ledger/note.h"

#define PREFIX "/tlog/"

/* An add-checkpoint request waiting for the witness's thread. */
struct pending {
    struct surf_http *h;
    struct evhttp_request *req;
    int64_t t0;
};

static void witness_replied(void *arg, int status, const char *ctype,
                            char *body, size_t len)
{
    struct pending *p = arg;
    surf_http_reply(p->h, p->req, status, ctype, body, len, p->t0);
    free(p);
}

static int add_checkpoint(struct daemon_tlog *t, struct surf_http *h,
                          struct evhttp_request *req, const char *verb,
                          int64_t t0)
{
    struct fo_err err;
    if (strcmp(verb, "POST") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "POST");
        surf_http_reply_error(h, req, FO_E_METHOD, "/add-checkpoint: use POST",
                              t0);
        return 1;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if (len > TLOG_WITNESS_BODY_MAX) {
        surf_http_reply_error(h, req, FO_E_INPUT_TOO_LARGE,
                              "add-checkpoint: body over 64 KiB", t0);
        return 1;
    }
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    struct pending *p = malloc(sizeof(*p));
    if (!p || !body) {
        free(p);
        surf_http_reply_error(h, req, FO_E_NOMEM, "out of memory", t0);
        return 1;
    }
    *p = (struct pending){h, req, t0};
    if (daemon_tlog_witness_submit(t, body, len, witness_replied, p, &err)) {
        free(p);
        surf_http_reply_error(h, req, err.code, err.msg, t0);
    }
    return 1; /* answered by witness_replied */
}

static void send_buf(struct surf_http *h, struct evhttp_request *req,
                     const char *ctype, const char *cache, struct fo_buf *b,
                     int64_t t0)
{
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Cache-Control", cache);
    evhttp_add_header(oh, "Access-Control-Allow-Origin", "*");
    evhttp_add_header(oh, "X-Content-Type-Options", "nosniff");
    size_t len = 0;
    char *data = fo_buf_detach(b, &len);
    if (!data) {
        surf_http_reply_error(h, req, FO_E_NOMEM, "out of memory", t0);
        return;
    }
    surf_http_reply(h, req, 200, ctype, data, len, t0);
}

int surf_tlog_route(void *hook, struct surf_http *h, struct evhttp_request *req,
                    const char *path, const char *verb, int authed, int64_t t0)
{
    struct daemon_tlog *t = hook;
    if (!strcmp(path, "/add-checkpoint"))
        return daemon_tlog_is_witness(t) ? add_checkpoint(t, h, req, verb, t0)
                                         : 0;
    if (strncmp(path, PREFIX, strlen(PREFIX)) != 0)
        return 0;
    if (!daemon_tlog_open(t) && !authed) {
        surf_http_reply_error(h, req, FO_E_UNAUTHORIZED,
                              "the public log needs the bearer token here "
                              "(--no-tlog-public)",
                              t0);
        return 1;
    }
    if (strcmp(verb, "GET") != 0) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          "GET");
        surf_http_reply_error(h, req, FO_E_METHOD, "/tlog/: use GET", t0);
        return 1;
    }
    const char *rel = path + strlen(PREFIX);
    struct fo_buf b;
    struct fo_err err;
    fo_buf_init(&b, NOTE_MAX_LEN * 2);
    if (!strcmp(rel, "checkpoint")) {
        if (daemon_tlog_checkpoint(t, &b, &err) == FO_OK)
            send_buf(h, req, "text/plain; charset=utf-8", "no-cache", &b, t0);
        else
            surf_http_reply_error(h, req, err.code, err.msg, t0);
    } else if (daemon_tlog_tile(t, rel, &b, &err) == FO_OK) {
        /* full and partial tiles alike never change */
        send_buf(h, req, "application/octet-stream",
                 "public, max-age=31536000, immutable", &b, t0);
    } else {
        surf_http_reply_error(h, req, err.code, err.msg, t0);
    }
    fo_buf_release(&b);
    return 1;
}
