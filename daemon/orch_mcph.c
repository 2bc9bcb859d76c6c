/* orch_mcph: the MCP Streamable HTTP transport (orch_mcph.h).
 *
 * Each POST is a small state machine: libevent's callbacks (a chunk of the
 * body, the end, an error) only record what came and wake the POST's own
 * event; that event reads the messages, ends the POST and calls back, so
 * no connection is ever freed under one of its own callbacks and a
 * callback may reset the whole transport. */
#include "daemon/orch_mcph.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "daemon/orch_int.h"
#include "daemon/orch_model.h"
#include "ledger/fo_buf.h"
#include "ledger/fo_json.h"
#include "ledger/fo_version.h"

#define SESSION_MAX 256 /* bytes of an Mcp-Session-Id we keep */
#define SNIPPET_MAX 160 /* bytes of an error body we repeat */

struct post {
    struct orch_mcph *h;
    struct post *next;
    int64_t id;  /* the request's JSON-RPC id; 0: nothing to wait for */
    cJSON *then; /* sent once this one is accepted */
    struct evhttp_connection *evcon; /* owns the bufferevent and SSL */
    struct evhttp_request *req;      /* NULL once libevent freed it */
    SSL *ssl;
    struct event *ev;    /* reads what came, from the loop */
    struct evbuffer *in; /* the body, as it comes */
    int status;          /* the HTTP status, 0 before the headers */
    int sse;             /* the body is an event stream */
    int done;            /* libevent is through with the request */
    int req_error;       /* an enum evhttp_request_error, or -1 */
    int answered;        /* the answer to id came */
    int had_session;     /* the request carried a session id */
    int setup_rc;        /* the request could not be made */
    struct fo_err setup_err;
    struct fo_buf data; /* the data lines of the event being read */
    /* a DELETE (orch_mcph_end_session): over once answered or failed */
    void (*closed)(void *arg);
    void *closed_arg;
};

struct orch_mcph {
    char name[64];
    const cJSON *cfg;
    struct event_base *base;
    struct evdns_base *dns; /* made at the first host name to look up */
    SSL_CTX *ssl;
    int tls, port, timeout_s;
    char *host, *addr, *path, *host_header;
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

struct url {
    int tls, port;
    char *host, *addr, *path, *host_header;
};

static void url_release(struct url *u)
{
    free(u->host);
    free(u->addr);
    free(u->path);
    free(u->host_header);
}

/* Splits url (checked here) into its parts; out may be NULL (check only). */
static int url_parse(const char *name, const char *url, struct url *out,
                     struct fo_err *err)
{
    if (strlen(url) > ORCH_MCPH_URL_MAX)
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.url: over %d bytes", name,
                          ORCH_MCPH_URL_MAX);
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(url, 0);
    const char *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
    const char *host = u ? evhttp_uri_get_host(u) : NULL;
    int rc = FO_OK;
    if (!scheme || !host || !*host ||
        (strcmp(scheme, "http") && strcmp(scheme, "https")))
        rc = fo_err_set(err, FO_E_INVALID,
                        "mcp_servers.%s.url: not an http:// or https:// URL",
                        name);
    else if (evhttp_uri_get_userinfo(u) || evhttp_uri_get_fragment(u))
        rc = fo_err_set(err, FO_E_INVALID,
                        "mcp_servers.%s.url: user info and fragments are "
                        "not allowed (use token_env)",
                        name);
    if (rc || !out) {
        if (u)
            evhttp_uri_free(u);
        return rc;
    }
    struct url p = {.tls = !strcmp(scheme, "https")};
    int port = evhttp_uri_get_port(u);
    p.port = port > 0 ? port : (p.tls ? 443 : 80);
    unsigned char ip[16];
    int literal =
        inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    int local = !strcasecmp(host, "localhost");
    const char *path = evhttp_uri_get_path(u);
    const char *q = evhttp_uri_get_query(u);
    struct fo_buf pb, hb;
    fo_buf_init(&pb, FO_BUF_UNLIMITED);
    fo_buf_init(&hb, FO_BUF_UNLIMITED);
    int v6 = strchr(host, ':') != NULL;
    int dflt = p.port == (p.tls ? 443 : 80);
    int r2 =
        fo_buf_puts(&pb, path && *path ? path : "/") ||
        (q && fo_buf_printf(&pb, "?%s", q)) ||
        (dflt ? fo_buf_printf(&hb, v6 ? "[%s]" : "%s", host)
              : fo_buf_printf(&hb, v6 ? "[%s]:%d" : "%s:%d", host, p.port));
    p.host = orch_strdup(host);
    if (literal || local)
        p.addr = orch_strdup(literal ? host : "127.0.0.1");
    p.path = r2 ? NULL : fo_buf_detach(&pb, NULL);
    p.host_header = r2 ? NULL : fo_buf_detach(&hb, NULL);
    fo_buf_release(&pb);
    fo_buf_release(&hb);
    evhttp_uri_free(u);
    if (!p.host || ((literal || local) && !p.addr) || !p.path ||
        !p.host_header) {
        url_release(&p);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = p;
    return FO_OK;
}

int orch_mcph_check(const char *name, const cJSON *srv, struct fo_err *err)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(srv, "url");
    if (!cJSON_IsString(u))
        return fo_err_set(err, FO_E_INVALID,
                          "mcp_servers.%s.url: must be a string", name);
    int rc = url_parse(name, u->valuestring, NULL, err);
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

static int make_ssl_ctx(struct orch_mcph *h, const char *ca_file,
                        struct fo_err *err)
{
    h->ssl = SSL_CTX_new(TLS_client_method());
    if (!h->ssl)
        return fo_err_set(err, FO_E_NOMEM, "tls: cannot create a context");
    SSL_CTX_set_verify(h->ssl, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(h->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
    int ok = SSL_CTX_set_min_proto_version(h->ssl, TLS1_2_VERSION) &&
             (ca_file ? SSL_CTX_load_verify_locations(h->ssl, ca_file, NULL)
                      : SSL_CTX_set_default_verify_paths(h->ssl)) == 1;
    if (!ok) {
        ERR_clear_error();
        return fo_err_set(err, FO_E_IO,
                          "MCP server %s: tls: cannot load the CA store%s%s",
                          h->name, ca_file ? " " : "", ca_file ? ca_file : "");
    }
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
    struct url u;
    rc = url_parse(name,
                   cJSON_GetObjectItemCaseSensitive(srv, "url")->valuestring,
                   &u, err);
    if (rc) {
        free(h);
        return rc;
    }
    h->tls = u.tls;
    h->port = u.port;
    h->host = u.host;
    h->addr = u.addr;
    h->path = u.path;
    h->host_header = u.host_header;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(srv, "ca_file");
    if (h->tls) {
        rc = make_ssl_ctx(h, ca ? ca->valuestring : NULL, err);
        if (rc) {
            orch_mcph_free(h);
            return rc;
        }
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
    if (p->ev)
        event_free(p->ev);
    if (p->req && !p->evcon)
        evhttp_request_free(p->req);
    if (p->evcon) /* frees the bufferevent, its SSL and any request */
        evhttp_connection_free(p->evcon);
    if (p->in)
        evbuffer_free(p->in);
    fo_buf_release(&p->data);
    cJSON_Delete(p->then);
    free(p);
    ERR_clear_error();
}

static void post_unlink(struct post *p)
{
    struct post **pp = &p->h->posts;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
}

static void wake(struct post *p)
{
    event_active(p->ev, EV_TIMEOUT, 0);
}

/* What the headers say, once: the status, the kind of body, the session. */
static void take_headers(struct post *p, struct evhttp_request *req)
{
    if (p->status || !req || evhttp_request_get_response_code(req) <= 0)
        return;
    p->status = evhttp_request_get_response_code(req);
    struct evkeyvalq *hd = evhttp_request_get_input_headers(req);
    const char *ct = evhttp_find_header(hd, "Content-Type");
    p->sse = ct && !strncasecmp(ct, "text/event-stream", 17);
    const char *sid = evhttp_find_header(hd, "Mcp-Session-Id");
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

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct post *p = arg;
    take_headers(p, req);
    evbuffer_add_buffer(p->in, evhttp_request_get_input_buffer(req));
    if (p->sse)
        wake(p);
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct post *p = arg;
    p->req = NULL; /* libevent frees it when we return */
    take_headers(p, req);
    if (req)
        evbuffer_add_buffer(p->in, evhttp_request_get_input_buffer(req));
    p->done = 1;
    wake(p);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct post *p = arg;
    p->req_error = (int)e;
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

/* The SSE events complete in p->in, each given to the caller: 0, 1 when p
 * is gone (a reset), -1 when an event is not JSON (fatal). */
static int read_events(struct post *p)
{
    for (;;) {
        size_t n = 0;
        char *line = evbuffer_readln(p->in, &n, EVBUFFER_EOL_CRLF);
        if (!line)
            return 0;
        if (n == 0) { /* the end of an event */
            if (!p->data.len)
                continue;
            cJSON *msg = NULL;
            struct fo_err perr;
            int rc = fo_json_parse(p->data.data, p->data.len, &msg, &perr);
            fo_buf_reset(&p->data);
            if (rc || !(cJSON_IsObject(msg) || cJSON_IsArray(msg))) {
                cJSON_Delete(msg);
                free(line);
                return -1;
            }
            int gone = deliver(p, msg);
            cJSON_Delete(msg);
            free(line);
            if (gone)
                return 1;
            continue;
        }
        if (!strncmp(line, "data:", 5)) {
            const char *d = line + 5 + (line[5] == ' ');
            int rc = (p->data.len && fo_buf_putc(&p->data, '\n')) ||
                     fo_buf_puts(&p->data, d);
            if (rc) {
                free(line);
                return -1;
            }
        } /* event:, id:, retry: and comments change nothing here */
        free(line);
    }
}

static void send_then(struct orch_mcph *h, cJSON *then);

/* The POST's own event: the messages that came, then, when the request is
 * over (or its answer came), the end. */
static void on_post(evutil_socket_t fd, short what, void *arg)
{
    struct post *p = arg;
    struct orch_mcph *h = p->h;
    (void)fd, (void)what;
    if (p->closed) { /* a DELETE: whatever came, the session is over */
        if (!p->done && !p->setup_rc)
            return;
        void (*closed)(void *) = p->closed;
        void *carg = p->closed_arg;
        post_unlink(p);
        post_free(p);
        closed(carg);
        return;
    }
    if (p->setup_rc) {
        struct fo_err err = p->setup_err;
        int64_t id = p->id;
        post_unlink(p);
        post_free(p);
        h->on_fail(h->arg, id, 0, &err);
        return;
    }
    int ok2xx = p->status / 100 == 2;
    if (p->sse && ok2xx) {
        int r = read_events(p);
        if (r > 0)
            return;
        if (r < 0) {
            post_fail(p, 1, FO_E_UPSTREAM,
                      "answered garbage (an event that is not a JSON-RPC "
                      "message)");
            return;
        }
        if (!p->done && !(p->id && p->answered))
            return; /* more to come */
    } else if (!p->done) {
        return;
    }
    /* over: no more of the connection */
    long verify = p->ssl ? SSL_get_verify_result(p->ssl) : X509_V_OK;
    p->ssl = NULL; /* freed with the connection */
    if (p->evcon) {
        evhttp_connection_free(p->evcon);
        p->evcon = NULL;
        p->req = NULL;
    }
    if (verify != X509_V_OK && !p->status) {
        post_fail(p, 0, FO_E_UPSTREAM,
                  "tls: the certificate of %s did not verify: %s", h->host,
                  X509_verify_cert_error_string(verify));
        return;
    }
    char snip[SNIPPET_MAX + 1];
    if (!p->status) {
        if (p->req_error == EVREQ_HTTP_DATA_TOO_LONG)
            post_fail(p, 0, FO_E_UPSTREAM, "an answer over %u bytes",
                      ORCH_MCPH_BODY_MAX);
        else if (p->req_error == EVREQ_HTTP_INVALID_HEADER)
            post_fail(p, 1, FO_E_UPSTREAM,
                      "answered garbage (not an HTTP response)");
        else if (p->req_error == EVREQ_HTTP_TIMEOUT)
            post_fail(p, 0, FO_E_TIMEOUT, "no answer from %s:%d in time",
                      h->host, h->port);
        else
            post_fail(p, 0, FO_E_UNAVAILABLE,
                      "cannot connect to %s:%d (or it closed without an "
                      "answer)",
                      h->host, h->port);
        return;
    }
    if (!ok2xx) {
        snippet(p->in, snip, sizeof(snip));
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
                      p->status == 401 || p->status == 403
                          ? " (check the token)"
                          : "",
                      snip[0] ? ": " : "", snip);
        return;
    }
    if (!p->sse && evbuffer_get_length(p->in) > 0) {
        size_t n = evbuffer_get_length(p->in);
        const char *body = (const char *)evbuffer_pullup(p->in, -1);
        cJSON *msg = NULL;
        struct fo_err perr;
        int rc = body ? fo_json_parse(body, n, &msg, &perr) : FO_E_NOMEM;
        if (rc || !(cJSON_IsObject(msg) || cJSON_IsArray(msg))) {
            cJSON_Delete(msg);
            snippet(p->in, snip, sizeof(snip));
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
        post_fail(p, p->sse ? 0 : 1, FO_E_UPSTREAM,
                  p->sse ? "the event stream ended without the answer"
                         : "HTTP %d without the answer",
                  p->status);
        return;
    }
    cJSON *then = p->then;
    p->then = NULL;
    post_unlink(p);
    post_free(p);
    if (then)
        send_then(h, then);
}

/* Checks the peer's certificate for the host name (or IP address) and
 * sends SNI for names. */
static int ssl_new(struct orch_mcph *h, SSL **out)
{
    SSL *ssl = SSL_new(h->ssl);
    if (!ssl)
        return 0;
    unsigned char a[16];
    int ip = inet_pton(AF_INET, h->host, a) == 1 ||
             inet_pton(AF_INET6, h->host, a) == 1;
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), h->host)
                : SSL_set1_host(ssl, h->host) &&
                      SSL_set_tlsext_host_name(ssl, h->host);
    if (!ok) {
        SSL_free(ssl);
        ERR_clear_error();
        return 0;
    }
    *out = ssl;
    return 1;
}

static int add_headers(struct orch_mcph *h, struct post *p,
                       struct evkeyvalq *hd, size_t len, const char *token)
{
    char cl[32];
    snprintf(cl, sizeof(cl), "%zu", len);
    int bad = evhttp_add_header(hd, "Host", h->host_header) ||
              evhttp_add_header(hd, "Content-Type", "application/json") ||
              evhttp_add_header(hd, "Accept",
                                "application/json, text/event-stream") ||
              evhttp_add_header(hd, "User-Agent", "forum/" FO_VERSION) ||
              evhttp_add_header(hd, "Connection", "close") ||
              evhttp_add_header(hd, "Content-Length", cl) ||
              (h->session[0] &&
               evhttp_add_header(hd, "Mcp-Session-Id", h->session)) ||
              (h->version[0] &&
               evhttp_add_header(hd, "MCP-Protocol-Version", h->version));
    p->had_session = h->session[0] != '\0';
    const cJSON *x;
    cJSON_ArrayForEach (x, cJSON_GetObjectItemCaseSensitive(h->cfg, "headers"))
        bad = bad || evhttp_add_header(hd, x->string, x->valuestring);
    if (!bad && token) {
        struct fo_buf auth;
        fo_buf_init(&auth, 16 * 1024);
        bad = fo_buf_printf(&auth, "Bearer %s", token) != FO_OK ||
              evhttp_add_header(hd, "Authorization", auth.data);
        if (auth.data) /* no copy of ours is left behind */
            memset(auth.data, 0, auth.len);
        fo_buf_release(&auth);
    }
    return bad;
}

/* Starts one request of method (POST with body, taken; or DELETE with
 * none) as a new post; p is set up before the request is made (then, or
 * closed). An error the caller can act on (the token variable is not set,
 * out of memory) is returned; later ones come to the post's event. */
static int start(struct orch_mcph *h, enum evhttp_cmd_type method, char *body,
                 int64_t rid, cJSON *then, void (*closed)(void *arg),
                 void *closed_arg, struct fo_err *err)
{
    const char *token = NULL;
    if (h->token_env) {
        token = secure_getenv(h->token_env);
        if (!token || !*token) {
            free(body);
            cJSON_Delete(then);
            return fo_err_set(err, FO_E_INVALID,
                              "MCP server %s: the token variable %s is not "
                              "set",
                              h->name, h->token_env);
        }
    }
    struct post *p = calloc(1, sizeof(*p));
    if (!p) {
        free(body);
        cJSON_Delete(then);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    p->h = h;
    p->id = rid;
    p->then = then;
    p->closed = closed;
    p->closed_arg = closed_arg;
    p->req_error = -1;
    fo_buf_init(&p->data, ORCH_MCPH_BODY_MAX);
    p->ev = event_new(h->base, -1, 0, on_post, p);
    p->in = evbuffer_new();
    if (!p->ev || !p->in) {
        free(body);
        post_free(p);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    p->next = h->posts;
    h->posts = p;
    struct bufferevent *bev = NULL;
    int rc = FO_E_NOMEM;
    if (!h->addr && !h->dns &&
        orch_model_dns_create(h->base, &h->dns, &p->setup_err) != FO_OK) {
        rc = p->setup_err.code;
        goto fail;
    }
    if (h->tls) {
        if (!ssl_new(h, &p->ssl)) {
            fo_err_set(&p->setup_err, FO_E_NOMEM,
                       "MCP server %s: tls: cannot make a session", h->name);
            goto fail;
        }
        bev = bufferevent_openssl_socket_new(h->base, -1, p->ssl,
                                             BUFFEREVENT_SSL_CONNECTING,
                                             BEV_OPT_CLOSE_ON_FREE);
        if (!bev) {
            SSL_free(p->ssl);
            p->ssl = NULL;
            goto nomem;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else if (!(bev = bufferevent_socket_new(h->base, -1,
                                              BEV_OPT_CLOSE_ON_FREE))) {
        goto nomem;
    }
    p->evcon = evhttp_connection_base_bufferevent_new(
        h->base, h->addr ? NULL : h->dns, bev, h->addr ? h->addr : h->host,
        (unsigned short)h->port);
    if (!p->evcon) {
        bufferevent_free(bev);
        p->ssl = NULL;
        goto nomem;
    }
    evhttp_connection_set_retries(p->evcon, 0);
    /* a backstop only: the client's timer for each request decides */
    evhttp_connection_set_timeout(p->evcon, h->timeout_s + 5);
    evhttp_connection_set_max_body_size(p->evcon,
                                        (ev_ssize_t)ORCH_MCPH_BODY_MAX);
    evhttp_connection_set_max_headers_size(p->evcon, 64 * 1024);
    p->req = evhttp_request_new(on_done, p);
    if (!p->req)
        goto nomem;
    evhttp_request_set_chunked_cb(p->req, on_chunk);
    evhttp_request_set_error_cb(p->req, on_error);
    size_t len = body ? strlen(body) : 0;
    if (add_headers(h, p, evhttp_request_get_output_headers(p->req), len,
                    token) ||
        (len &&
         evbuffer_add(evhttp_request_get_output_buffer(p->req), body, len))) {
        fo_err_set(&p->setup_err, FO_E_INVALID,
                   "MCP server %s: cannot build the request headers", h->name);
        rc = FO_E_INVALID;
        goto fail;
    }
    free(body);
    body = NULL;
    if (evhttp_make_request(p->evcon, p->req, method, h->path)) {
        p->req = NULL; /* libevent freed it */
        fo_err_set(&p->setup_err, FO_E_UNAVAILABLE,
                   "MCP server %s: cannot connect to %s:%d", h->name, h->host,
                   h->port);
        rc = FO_E_UNAVAILABLE;
        goto fail;
    }
    return FO_OK;
nomem:
    fo_err_set(&p->setup_err, FO_E_NOMEM, NULL);
    rc = FO_E_NOMEM;
fail:
    free(body);
    p->setup_rc = rc; /* told from the loop, never from inside this call */
    wake(p);
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
    return start(h, EVHTTP_REQ_POST, body, rid, then, NULL, NULL, err);
}

int orch_mcph_end_session(struct orch_mcph *h, void (*closed)(void *arg),
                          void *arg)
{
    if (!h || !h->session[0])
        return 0;
    struct fo_err err;
    /* the header goes with this request; the session is over for the rest */
    int rc = start(h, EVHTTP_REQ_DELETE, NULL, 0, NULL, closed, arg, &err);
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
    SSL_CTX_free(h->ssl);
    free(h->host);
    free(h->addr);
    free(h->path);
    free(h->host_header);
    free(h);
}
