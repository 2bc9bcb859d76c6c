/* orch_mcph: the MCP Streamable HTTP transport (orch_mcph.h), on the HTTP
 * client (httpc.h).
 *
 * Each POST is one httpc request with its body streamed: the chunks of an
 * event stream are read as they come (httpc's SSE reader), each message
 * handed to the caller; the end of the request settles the POST. httpc
 * calls from its own events, so a callback may reset the whole transport
 * (the POST's request is cancelled under it, safely). */
#include "daemon/orch_mcph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/http.h>

#include "daemon/httpc.h"
#include "daemon/orch_types_int.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"

#define SESSION_MAX 256 /* bytes of an Mcp-Session-Id we keep */
#define SNIPPET_MAX 160 /* bytes of an error body we repeat */

struct post {
    struct orch_mcph *h;
    struct post *next;
    int64_t id;  /* the request's JSON-RPC id; 0: nothing to wait for */
    cJSON *then; /* sent once this one is accepted */
    struct httpc_req *req; /* NULL once it ended */
    struct httpc_sse sse;  /* the event stream, as it comes */
    int status;            /* the HTTP status, 0 before the headers */
    int is_sse;            /* the body is an event stream */
    int answered;          /* the answer to id came */
    int had_session;       /* the request carried a session id */
    /* a DELETE (orch_mcph_end_session): over once answered or failed */
    void (*closed)(void *arg);
    void *closed_arg;
};

struct orch_mcph {
    char name[64];
    const cJSON *cfg;
    struct event_base *base;
    struct evdns_base *dns; /* made at the first host name to look up */
    struct httpc_tls *tls;
    struct httpc_url url;
    int timeout_s;
    const char *token_env;
    char session[SESSION_MAX + 1];
    char version[32];
    struct post *posts;
    unsigned gen; /* counts resets: a reader sees its POST went */
    orch_mcph_msg_fn on_msg;
    orch_mcph_fail_fn on_fail;
    void *arg;
};

/* ---- configuration ------------------------------------------------------ */

static int token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-';
}

static int env_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 128 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

/* Headers the transport sets itself. */
static int reserved(const char *n)
{
    static const char *const r[] = {"host",
                                    "content-type",
                                    "content-length",
                                    "accept",
                                    "connection",
                                    "mcp-session-id",
                                    "authorization",
                                    "mcp-protocol-version",
                                    "transfer-encoding",
                                    "last-event-id",
                                    "te",
                                    "upgrade",
                                    "proxy-authorization"};
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
        if (!strcasecmp(n, r[i]))
            return 1;
    return 0;
}

/* Checks url; FO_E_INVALID naming the field. */
static int url_check(const char *name, const char *url, struct fo_err *err)
{
    int rc = httpc_url_parse(url, NULL, err);
    if (rc)
        fo_err_prefix(err, "mcp_servers.%s.url", name);
    return rc;
}

int orch_mcph_check(const char *name, const cJSON *srv, struct fo_err *err)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(srv, "url");
    if (!cJSON_IsString(u))
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.url: must be a string", name);
    int rc = url_check(name, u->valuestring, err);
    if (rc)
        return rc;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(srv, "headers"), *x;
    if (h &&
        (!cJSON_IsObject(h) || cJSON_GetArraySize(h) > ORCH_MCPH_HEADERS_MAX))
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.headers: must be an object of at "
                          "most %d strings",
                          name, ORCH_MCPH_HEADERS_MAX);
    cJSON_ArrayForEach (x, h) {
        const char *n = x->string;
        size_t nl = strlen(n);
        int ok = nl > 0 && nl <= 64;
        for (size_t i = 0; ok && i < nl; i++)
            ok = token_char(n[i]);
        if (!ok)
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.headers: \"%.64s\": a name is "
                              "1-64 of [A-Za-z0-9-]",
                              name, n);
        if (reserved(n))
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.headers: %s is set by forum%s",
                              name, n,
                              !strcasecmp(n, "authorization")
                                  ? " (name the token's variable in "
                                    "token_env)"
                                  : "");
        ok = cJSON_IsString(x) && strlen(x->valuestring) <= 4096;
        for (const char *c = ok ? x->valuestring : ""; ok && *c; c++)
            ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
        if (!ok)
            return fo_err_set(err, FO_E_INVALID,
                              "mcp_servers.%s.headers.%s: must be a string "
                              "of one line",
                              name, n);
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(srv, "token_env");
    if (t && (!cJSON_IsString(t) || !env_name_ok(t->valuestring)))
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.token_env: must be the name of an "
                          "environment variable",
                          name);
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(srv, "ca_file");
    if (ca && (!cJSON_IsString(ca) || !ca->valuestring[0]))
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.ca_file: must be a path", name);
    return FO_OK;
}

int orch_mcph_create(const char *name, const cJSON *srv, int timeout_s,
                     struct event_base *base, orch_mcph_msg_fn on_msg,
                     orch_mcph_fail_fn on_fail, void *arg,
                     struct orch_mcph **out, struct fo_err *err)
{
    int rc = orch_mcph_check(name, srv, err);
    if (rc)
        return rc;
    struct orch_mcph *h = calloc(1, sizeof(*h));
    if (!h)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->cfg = srv;
    h->base = base;
    h->timeout_s = timeout_s;
    h->on_msg = on_msg;
    h->on_fail = on_fail;
    h->arg = arg;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(srv, "token_env");
    h->token_env = t ? t->valuestring : NULL;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(srv, "ca_file");
    rc = httpc_url_parse(
        cJSON_GetObjectItemCaseSensitive(srv, "url")->valuestring, &h->url,
        err);
    if (!rc && h->url.tls) {
        rc = httpc_tls_create(ca ? ca->valuestring : NULL, &h->tls, err);
        if (rc)
            fo_err_prefix(err, "MCP server %s", h->name);
    }
    if (rc) {
        orch_mcph_free(h);
        return rc;
    }
    *out = h;
    return FO_OK;
}

void orch_mcph_set_version(struct orch_mcph *h, const char *version)
{
    size_t n = version ? strlen(version) : 0;
    int ok = n > 0 && n < sizeof(h->version);
    for (size_t i = 0; ok && i < n; i++)
        ok = token_char(version[i]) || version[i] == '.';
    snprintf(h->version, sizeof(h->version), "%s", ok ? version : "");
}

/* ---- one POST ----------------------------------------------------------- */

static void post_free(struct post *p)
{
    httpc_req_cancel(p->req); /* NULL-safe; deferred inside its callback */
    httpc_sse_release(&p->sse);
    cJSON_Delete(p->then);
    free(p);
}

static void post_unlink(struct post *p)
{
    struct post **pp = &p->h->posts;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
}

/* What the headers say, once: the status, the kind of body, the session. */
static void take_headers(struct post *p, int status, const char *ct,
                         const char *sid)
{
    if (p->status || status <= 0)
        return;
    p->status = status;
    p->is_sse = ct && !strncasecmp(ct, "text/event-stream", 17);
    struct orch_mcph *h = p->h;
    if (sid && p->status / 100 == 2 && !h->session[0] &&
        strlen(sid) <= SESSION_MAX) {
        int ok = sid[0] != '\0';
        for (const char *c = sid; ok && *c; c++)
            ok = *c >= 0x21 && *c <= 0x7e; /* visible ASCII (the spec) */
        if (ok)
            snprintf(h->session, sizeof(h->session), "%s", sid);
    }
}

/* The message (or each of a batch) to the caller; 0, or 1 when the
 * transport was reset meanwhile (p is gone). */
static int deliver(struct post *p, cJSON *msg)
{
    struct orch_mcph *h = p->h;
    unsigned gen = h->gen;
    cJSON *one = cJSON_IsArray(msg) ? msg->child : msg;
    for (; one; one = cJSON_IsArray(msg) ? one->next : NULL) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(one, "id");
        if (p->id && cJSON_IsNumber(id) && (int64_t)id->valuedouble == p->id &&
            !cJSON_GetObjectItemCaseSensitive(one, "method"))
            p->answered = 1;
        h->on_msg(h->arg, one);
        if (h->gen != gen)
            return 1;
    }
    return 0;
}

/* Ends p with an error: freed first, then the caller is told. */
static void post_fail(struct post *p, int fatal, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void post_fail(struct post *p, int fatal, int rc, const char *fmt, ...)
{
    struct orch_mcph *h = p->h;
    struct fo_err err;
    char msg[FO_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fo_err_set(&err, rc, "MCP server %s: %s", h->name, msg);
    int64_t id = p->id;
    post_unlink(p);
    post_free(p);
    h->on_fail(h->arg, id, fatal, &err);
}

/* The body's first bytes, one line, for an error message. */
static void snippet(struct evbuffer *in, char *out, size_t size)
{
    size_t n = evbuffer_get_length(in);
    if (n > SNIPPET_MAX)
        n = SNIPPET_MAX;
    if (n >= size)
        n = size - 1;
    evbuffer_copyout(in, out, n);
    out[n] = '\0';
    n = orch_utf8_prefix(out, n, n);
    out[n] = '\0';
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = ' ';
}

/* One event of the stream: a JSON-RPC message (or a batch) for the
 * caller. 1 when p is gone (a reset), 2 when the event is not JSON. */
static int on_event(void *arg, const char *type, const char *data, size_t len)
{
    struct post *p = arg;
    (void)type; /* "message", or whatever the server named it */
    cJSON *msg = NULL;
    struct fo_err perr;
    int rc = fo_json_parse(data, len, &msg, &perr);
    if (rc || !(cJSON_IsObject(msg) || cJSON_IsArray(msg))) {
        cJSON_Delete(msg);
        return 2;
    }
    int gone = deliver(p, msg);
    cJSON_Delete(msg);
    return gone;
}

static void send_then(struct orch_mcph *h, cJSON *then);

/* p was accepted: it ends, and what waited on it goes. */
static void post_ok(struct post *p)
{
    struct orch_mcph *h = p->h;
    cJSON *then = p->then;
    p->then = NULL;
    post_unlink(p);
    post_free(p);
    if (then)
        send_then(h, then);
}

/* The events complete in data: 0 to go on, 1 when p is over (gone). */
static int read_events(struct post *p, struct evbuffer *data)
{
    int r = httpc_sse_feed(&p->sse, data, on_event, p);
    if (r == 1)
        return 1;
    if (r) {
        post_fail(p, 1, FO_E_UPSTREAM,
                  r == 2 ? "answered garbage (an event that is not a "
                           "JSON-RPC message)"
                         : "an event over %u bytes",
                  ORCH_MCPH_BODY_MAX);
        return 1;
    }
    if (p->id && p->answered) { /* the rest of the stream is not ours */
        post_ok(p);
        return 1;
    }
    return 0;
}

static void on_chunk(void *arg, struct httpc_req *r, struct evbuffer *data)
{
    struct post *p = arg;
    take_headers(p, httpc_req_status(r), httpc_req_header(r, "Content-Type"),
                 httpc_req_header(r, "Mcp-Session-Id"));
    if (p->is_sse && p->status / 100 == 2 && !p->closed)
        read_events(p, data);
    /* anything else is read whole at the end */
}

/* The end of a request that brought no status. */
static void fail_unanswered(struct post *p, const struct httpc_result *res)
{
    struct orch_mcph *h = p->h;
    switch (res->end) {
    case HTTPC_END_TLS:
        post_fail(p, 0, FO_E_UPSTREAM, "%s", res->err.msg);
        break;
    case HTTPC_END_SETUP:
        post_fail(p, 0, res->err.code, "%s", res->err.msg);
        break;
    case HTTPC_END_TOO_LARGE:
        post_fail(p, 0, FO_E_UPSTREAM, "an answer over %u bytes",
                  ORCH_MCPH_BODY_MAX);
        break;
    case HTTPC_END_MALFORMED:
        post_fail(p, 1, FO_E_UPSTREAM,
                  "answered garbage (not an HTTP response)");
        break;
    case HTTPC_END_TIMEOUT:
        post_fail(p, 0, FO_E_TIMEOUT, "no answer from %s:%d in time",
                  h->url.host, h->url.port);
        break;
    default:
        post_fail(p, 0, FO_E_UNAVAILABLE,
                  "cannot connect to %s:%d (or it closed without an "
                  "answer)",
                  h->url.host, h->url.port);
        break;
    }
}

/* A status other than 2xx. */
static void fail_status(struct post *p, struct evbuffer *body)
{
    char snip[SNIPPET_MAX + 1];
    snippet(body, snip, sizeof(snip));
    /* a forgotten session: 404 as the spec says, or 400 naming the
     * session (as the reference servers answer an id they do not
     * know): either way the next use starts a new one */
    if ((p->status == 404 ||
         (p->status == 400 && strcasestr(snip, "session"))) &&
        p->had_session)
        post_fail(p, 1, FO_E_UNAVAILABLE,
                  "the session ended (HTTP %d%s%s); it starts again at "
                  "the next use",
                  p->status, p->status == 400 ? ": " : "",
                  p->status == 400 ? snip : "");
    else
        post_fail(p, 0, p->status >= 500 ? FO_E_UNAVAILABLE : FO_E_UPSTREAM,
                  "HTTP %d%s%s%s", p->status,
                  p->status == 401 || p->status == 403 ? " (check the token)"
                                                       : "",
                  snip[0] ? ": " : "", snip);
}

/* The request is over: the messages left, then the end. */
static void on_done(void *arg, struct httpc_result *res)
{
    struct post *p = arg;
    p->req = NULL; /* httpc frees it when this returns */
    take_headers(
        p, res->status,
        res->headers ? evhttp_find_header(res->headers, "Content-Type") : NULL,
        res->headers ? evhttp_find_header(res->headers, "Mcp-Session-Id")
                     : NULL);
    if (p->closed) { /* a DELETE: whatever came, the session is over */
        void (*closed)(void *) = p->closed;
        void *carg = p->closed_arg;
        post_unlink(p);
        post_free(p);
        closed(carg);
        return;
    }
    if (!p->status) {
        fail_unanswered(p, res);
        return;
    }
    if (p->status / 100 != 2) {
        fail_status(p, res->body);
        return;
    }
    if (p->is_sse) {
        if (read_events(p, res->body))
            return;
    } else if (evbuffer_get_length(res->body) > 0) {
        size_t n = evbuffer_get_length(res->body);
        const char *body = (const char *)evbuffer_pullup(res->body, -1);
        cJSON *msg = NULL;
        struct fo_err perr;
        int rc = body ? fo_json_parse(body, n, &msg, &perr) : FO_E_NOMEM;
        if (rc || !(cJSON_IsObject(msg) || cJSON_IsArray(msg))) {
            char snip[SNIPPET_MAX + 1];
            cJSON_Delete(msg);
            snippet(res->body, snip, sizeof(snip));
            post_fail(p, 1, FO_E_UPSTREAM,
                      "answered garbage (not a JSON-RPC message: %.60s)", snip);
            return;
        }
        int gone = deliver(p, msg);
        cJSON_Delete(msg);
        if (gone)
            return;
    }
    if (p->id && !p->answered) {
        post_fail(p, p->is_sse ? 0 : 1, FO_E_UPSTREAM,
                  p->is_sse ? "the event stream ended without the answer"
                            : "HTTP %d without the answer",
                  p->status);
        return;
    }
    post_ok(p);
}

/* The headers of a request: the transport's, the configured ones, the
 * token. auth holds "Bearer TOKEN" while the request is built. */
static size_t make_headers(struct orch_mcph *h, struct httpc_header *hd,
                           size_t cap, struct fo_buf *auth, const char *token)
{
    size_t n = 0;
    hd[n++] = (struct httpc_header){"Content-Type", "application/json"};
    hd[n++] =
        (struct httpc_header){"Accept", "application/json, text/event-stream"};
    if (h->session[0])
        hd[n++] = (struct httpc_header){"Mcp-Session-Id", h->session};
    if (h->version[0])
        hd[n++] = (struct httpc_header){"MCP-Protocol-Version", h->version};
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(h->cfg, "headers"))
        if (n < cap - 1)
            hd[n++] = (struct httpc_header){x->string, x->valuestring};
    if (token && fo_buf_printf(auth, "Bearer %s", token) == FO_OK)
        hd[n++] = (struct httpc_header){"Authorization", auth->data};
    return n;
}

/* Starts one request of method (POST with body, taken; or DELETE with
 * none) as a new post; p is set up before the request is made (then, or
 * closed). An error the caller can act on (the token variable is not set,
 * out of memory) is returned; later ones come to on_fail or closed. */
static int start(struct orch_mcph *h, int method, char *body, int64_t rid,
                 cJSON *then, void (*closed)(void *arg), void *closed_arg,
                 struct fo_err *err)
{
    const char *token = NULL;
    int rc = FO_OK;
    if (h->token_env) {
        token = secure_getenv(h->token_env);
        if (!token || !*token)
            rc = fo_err_set(err, FO_E_INVALID,
                            "MCP server %s: the token variable %s is not "
                            "set",
                            h->name, h->token_env);
    }
    if (!rc && !h->url.addr && !h->dns)
        rc = httpc_dns_create(h->base, &h->dns, err);
    struct post *p = rc ? NULL : calloc(1, sizeof(*p));
    if (!rc && !p)
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
    if (rc) {
        free(body);
        cJSON_Delete(then);
        return rc;
    }
    p->h = h;
    p->id = rid;
    p->then = then;
    p->closed = closed;
    p->closed_arg = closed_arg;
    httpc_sse_init(&p->sse, ORCH_MCPH_BODY_MAX);
    struct httpc_header hd[ORCH_MCPH_HEADERS_MAX + 8];
    struct fo_buf auth;
    fo_buf_init(&auth, 16 * 1024);
    p->had_session = h->session[0] != '\0';
    struct httpc_spec spec = {
        .method = method,
        .url = &h->url,
        .headers = hd,
        .n_headers =
            make_headers(h, hd, sizeof(hd) / sizeof(hd[0]), &auth, token),
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .tls = h->tls,
        .dns = h->dns,
        /* a backstop only: the client's timer for each request decides */
        .timeout_ms = (h->timeout_s + 5) * 1000,
        .body_max = ORCH_MCPH_BODY_MAX,
        .on_chunk = on_chunk,
        .done = on_done,
        .arg = p};
    rc = httpc_req_start(h->base, &spec, &p->req, err);
    if (auth.data) /* no copy of ours is left behind */
        memset(auth.data, 0, auth.len);
    fo_buf_release(&auth);
    free(body);
    if (rc) {
        fo_err_prefix(err, "MCP server %s", h->name);
        p->then = NULL; /* the caller's error says it all */
        cJSON_Delete(then);
        post_free(p);
        return rc;
    }
    p->next = h->posts;
    h->posts = p;
    return FO_OK;
}

int orch_mcph_post(struct orch_mcph *h, cJSON *msg, cJSON *then,
                   struct fo_err *err)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    int64_t rid =
        cJSON_IsNumber(id) && cJSON_GetObjectItemCaseSensitive(msg, "method")
            ? (int64_t)id->valuedouble
            : 0;
    char *body = cJSON_PrintUnformatted(msg);
    cJSON_Delete(msg);
    if (!body) {
        cJSON_Delete(then);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    return start(h, HTTPC_POST, body, rid, then, NULL, NULL, err);
}

int orch_mcph_end_session(struct orch_mcph *h, void (*closed)(void *arg),
                          void *arg)
{
    if (!h || !h->session[0])
        return 0;
    struct fo_err err;
    /* the header goes with this request; the session is over for the rest */
    int rc = start(h, HTTPC_DELETE, NULL, 0, NULL, closed, arg, &err);
    h->session[0] = '\0';
    h->version[0] = '\0';
    return rc == FO_OK;
}

static void send_then(struct orch_mcph *h, cJSON *then)
{
    struct fo_err err;
    int64_t id = 0;
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(then, "id");
    if (cJSON_IsNumber(i))
        id = (int64_t)i->valuedouble;
    if (orch_mcph_post(h, then, NULL, &err))
        h->on_fail(h->arg, id, 1, &err);
}

void orch_mcph_reset(struct orch_mcph *h)
{
    if (!h)
        return;
    h->gen++;
    while (h->posts) {
        struct post *p = h->posts;
        h->posts = p->next;
        post_free(p);
    }
    h->session[0] = '\0';
    h->version[0] = '\0';
}

void orch_mcph_free(struct orch_mcph *h)
{
    if (!h)
        return;
    orch_mcph_reset(h);
    if (h->dns)
        evdns_base_free(h->dns, 0);
    httpc_tls_free(h->tls);
    httpc_url_release(&h->url);
    free(h);
}
