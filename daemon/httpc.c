/* httpc: the one HTTP client (see httpc.h). A request's end is judged from
 * an event or a timer of its own, never inside libevent's callback of the
 * connection it frees. */
#include "daemon/httpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

#include "ledger/fo_version.h"

#define BODY_MAX_DEFAULT (4u * 1024u * 1024u)
#define HEADERS_MAX_DEFAULT (64 * 1024)

/* ---- URLs ---------------------------------------------------------------- */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void httpc_url_release(struct httpc_url *u)
{
    if (!u)
        return;
    free(u->host);
    free(u->addr);
    free(u->path);
    free(u->host_header);
    *u = (struct httpc_url){0};
}

/* The parts of a parsed URI that make a request; p says what is wrong. */
static const char *uri_check(const struct evhttp_uri *p, int *tls)
{
    const char *scheme = evhttp_uri_get_scheme(p);
    const char *host = evhttp_uri_get_host(p);
    if (!scheme || (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")))
        return "not an http:// or https:// URL";
    if (!host || !*host)
        return "no host";
    if (evhttp_uri_get_userinfo(p))
        return "user info is not allowed (give a credential by its own "
               "setting)";
    if (evhttp_uri_get_fragment(p))
        return "a fragment is not allowed";
    if (evhttp_uri_get_port(p) == 0)
        return "port 0";
    *tls = !strcasecmp(scheme, "https");
    return NULL;
}

int httpc_url_parse(const char *url, struct httpc_url *out, struct fo_err *err)
{
    if (!url)
        return fo_err_set(err, FO_E_INVALID, "no URL");
    if (strlen(url) > HTTPC_URL_MAX)
        return fo_err_set(err, FO_E_INVALID, "over %d bytes", HTTPC_URL_MAX);
    /* strict parsing: spaces, controls and ports over 65535 fail here */
    struct evhttp_uri *p = evhttp_uri_parse_with_flags(url, 0);
    if (!p)
        return fo_err_set(err, FO_E_INVALID,
                          "not a URL (a bad character or port?)");
    int tls = 0;
    const char *why = uri_check(p, &tls);
    if (why || !out) {
        evhttp_uri_free(p);
        return why ? fo_err_set(err, FO_E_INVALID, "%s", why) : FO_OK;
    }
    struct httpc_url u = {.tls = tls};
    int port = evhttp_uri_get_port(p);
    u.port = port > 0 ? port : (tls ? 443 : 80);
    /* libevent keeps an IPv6 literal's brackets */
    const char *h = evhttp_uri_get_host(p);
    size_t hl = strlen(h);
    int v6 = h[0] == '[' && hl > 2 && h[hl - 1] == ']';
    u.host = v6 ? strndup(h + 1, hl - 2) : dup_str(h);
    const char *path = evhttp_uri_get_path(p);
    const char *q = evhttp_uri_get_query(p);
    struct fo_buf pb, hb;
    fo_buf_init(&pb, HTTPC_URL_MAX + 2);
    fo_buf_init(&hb, HTTPC_URL_MAX + 16);
    int bad = !u.host;
    if (!bad) {
        unsigned char ip[16];
        int literal = inet_pton(AF_INET, u.host, ip) == 1 ||
                      inet_pton(AF_INET6, u.host, ip) == 1;
        int local = !strcasecmp(u.host, "localhost");
        if (literal || local)
            bad = !(u.addr = dup_str(literal ? u.host : "127.0.0.1"));
        int dflt = u.port == (tls ? 443 : 80);
        bad = bad || fo_buf_puts(&pb, path && *path ? path : "/") ||
              (q && fo_buf_printf(&pb, "?%s", q)) ||
              (dflt ? fo_buf_printf(&hb, v6 ? "[%s]" : "%s", u.host)
                    : fo_buf_printf(&hb, v6 ? "[%s]:%d" : "%s:%d", u.host,
                                    u.port));
    }
    if (!bad) {
        u.path = fo_buf_detach(&pb, NULL);
        u.host_header = fo_buf_detach(&hb, NULL);
        bad = !u.path || !u.host_header;
    }
    fo_buf_release(&pb);
    fo_buf_release(&hb);
    evhttp_uri_free(p);
    if (bad) {
        httpc_url_release(&u);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    *out = u;
    return FO_OK;
}

void httpc_url_text(const struct httpc_url *u, const char *path, char *out,
                    size_t cap)
{
    snprintf(out, cap, "%s://%s%s", u->tls ? "https" : "http", u->host_header,
             path ? path : u->path);
}

/* ---- TLS and DNS --------------------------------------------------------- */

struct httpc_tls {
    SSL_CTX *ctx;
};

void httpc_tls_free(struct httpc_tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

int httpc_tls_create(const char *ca_file, struct httpc_tls **out,
                     struct fo_err *err)
{
    struct httpc_tls *t = calloc(1, sizeof(*t));
    if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method()))) {
        free(t);
        ERR_clear_error();
        return fo_err_set(err, FO_E_NOMEM, "tls: cannot create a context");
    }
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* thousands of connections may wait for models at once: an idle one
     * gives its record buffers back (~17 KiB each, measured) */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_RELEASE_BUFFERS);
    int ok = SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) &&
             (ca_file ? SSL_CTX_load_verify_locations(t->ctx, ca_file, NULL)
                      : SSL_CTX_set_default_verify_paths(t->ctx)) == 1;
    if (!ok) {
        ERR_clear_error();
        httpc_tls_free(t);
        return fo_err_set(err, FO_E_IO, "tls: cannot load the CA store%s%s",
                          ca_file ? " " : "", ca_file ? ca_file : "");
    }
    *out = t;
    return FO_OK;
}

/* A session that checks the peer's certificate for host (a name, with
 * SNI, or an IP address); NULL when out of memory. */
static SSL *ssl_for(const struct httpc_tls *t, const char *host)
{
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl)
        return NULL;
    unsigned char a[16];
    int ip =
        inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
    int ok =
        ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
           : SSL_set1_host(ssl, host) && SSL_set_tlsext_host_name(ssl, host);
    if (!ok) {
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    return ssl;
}

int httpc_dns_create(struct event_base *base, struct evdns_base **out,
                     struct fo_err *err)
{
    struct evdns_base *dns =
        evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (!dns)
        return fo_err_set(err, FO_E_NOMEM, "dns: cannot create a resolver");
    /* Not EVDNS_BASE_INITIALIZE_NAMESERVERS: with it evdns_base_new fails
     * when /etc/resolv.conf is missing. This reads /etc/hosts first and
     * without resolv.conf (1) asks 127.0.0.1, as the C library does. */
    int r =
        evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL, "/etc/resolv.conf");
    if (r != 0 && r != 1) {
        evdns_base_free(dns, 0);
        return fo_err_set(err, r == 4 ? FO_E_NOMEM : FO_E_IO,
                          "dns: cannot read /etc/resolv.conf (error %d)", r);
    }
    *out = dns;
    return FO_OK;
}

/* ---- one request --------------------------------------------------------- */

/* A host name lookup in flight. evdns answers even a cancelled lookup (with
 * EVUTIL_EAI_CANCEL, on a later loop iteration), so the lookup lives on its
 * own: a request lets go of it by clearing r, and the answer frees it. */
struct lookup {
    struct httpc_req *r; /* NULL once the request has let go */
    struct evdns_getaddrinfo_request *req;
};

struct httpc_req {
    struct event_base *base;
    struct evdns_base *dns;
    const struct httpc_tls *tls;
    char *host; /* for the connection and messages */
    int port, method;
    char *path;
    struct evhttp_request *req;      /* built at the start; NULL once
                                        libevent has freed it */
    int handed;                      /* req was given to the connection */
    struct evhttp_connection *evcon; /* owns the bufferevent and its SSL */
    SSL *ssl;                        /* owned by the bufferevent */
    struct lookup *lookup;
    struct event *ev;       /* delivers chunks and the end, from the loop */
    struct event *deadline; /* timeout_ms */
    struct event *ctimer;   /* connect_ms */
    struct event *conn_ev;  /* watches dupfd until the socket connects */
    int dupfd;
    int connect_ms, timeout_ms;
    size_t body_max, headers_max;
    struct evbuffer *in; /* the body as it came, not yet handed over */
    struct evkeyvalq *hdrs;
    int status;
    size_t total;
    int ended;    /* libevent's part is over or cut: its callbacks are
                     ignored */
    int complete; /* the whole response came */
    int forced;   /* HTTPC_END_ of a timer that cut it, or SETUP; else 0 */
    int req_error;
    int connected, dns_error;
    long verify;
    int chunking;  /* on_chunk is running */
    int cancelled; /* cancelled while on_chunk ran */
    int finishing; /* done is running */
    struct fo_err err;
    httpc_chunk_fn on_chunk;
    httpc_done_fn done;
    void *arg;
    /* the request as built, kept for a retry on a fresh connection */
    struct evkeyvalq *oh; /* its headers */
    char *body;
    size_t body_len;
    int64_t deadline_at;         /* the monotonic ms of timeout_ms */
    char addr[INET6_ADDRSTRLEN]; /* the numeric address connected to */
    /* the connection */
    struct httpc_pool *pool;         /* NULL: one connection, closed after */
    struct evbuffer_cb_entry *outcb; /* watches the request leave */
    struct evbuffer_cb_entry *incb;  /* watches the response come */
    int reused;                      /* the connection came from the pool */
    int retried;     /* this is the retry on a fresh connection */
    int sent_all;    /* all of the request left (or a failure dropped it) */
    int got_bytes;   /* a byte of a response came */
    int conn_closed; /* libevent closed the connection (either side) */
    int keep;        /* the connection may go back to the pool */
};

/* An idle keep-alive connection of a pool. */
struct pconn {
    struct pconn *next;
    struct httpc_pool *pool;
    struct evhttp_connection *evcon;
    SSL *ssl;
    const struct httpc_tls *tls; /* part of the key: NULL for http */
    char *host;
    int port;
    char addr[INET6_ADDRSTRLEN];
    struct event *timer; /* the idle timeout, or the close just seen */
};

struct httpc_pool {
    struct event_base *base;
    int max_idle, idle_ms;
    struct pconn *idle; /* most recently used first */
    size_t live;        /* requests started on it and not yet freed */
    int closing;        /* httpc_pool_free was called: freed at live 0 */
    struct httpc_pool_stats st;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

static void lookup_drop(struct httpc_req *r)
{
    if (!r->lookup)
        return;
    r->lookup->r = NULL;
    evdns_getaddrinfo_cancel(r->lookup->req);
    r->lookup = NULL;
}

static void pool_put(struct httpc_req *r);
static void pool_unref(struct httpc_pool *p);

/* Lets go of the connection: back to the pool when r->keep, else closed.
 * Our watchers come off it first (freeing it tells its close callback). */
static void conn_release(struct httpc_req *r)
{
    if (!r->evcon)
        return;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
    if (r->outcb)
        evbuffer_remove_cb_entry(bufferevent_get_output(bev), r->outcb);
    if (r->incb)
        evbuffer_remove_cb_entry(bufferevent_get_input(bev), r->incb);
    r->outcb = r->incb = NULL;
    evhttp_connection_set_closecb(r->evcon, NULL, NULL);
    if (r->keep && r->pool)
        pool_put(r); /* takes r->evcon, or frees it */
    else
        evhttp_connection_free(r->evcon); /* its bufferevent, SSL, request */
    r->evcon = NULL;
    r->ssl = NULL;
}

static void req_free(struct httpc_req *r)
{
    lookup_drop(r);
    if (r->conn_ev)
        event_free(r->conn_ev);
    if (r->dupfd >= 0)
        close(r->dupfd);
    if (r->ev)
        event_free(r->ev);
    if (r->deadline)
        event_free(r->deadline);
    if (r->ctimer)
        event_free(r->ctimer);
    if (r->req && !r->handed) /* made but never handed to a connection */
        evhttp_request_free(r->req);
    conn_release(r);
    if (r->oh) {
        evhttp_clear_headers(r->oh);
        free(r->oh);
    }
    free(r->body);
    if (r->pool)
        pool_unref(r->pool);
    if (r->in)
        evbuffer_free(r->in);
    if (r->hdrs) {
        evhttp_clear_headers(r->hdrs);
        free(r->hdrs);
    }
    free(r->host);
    free(r->path);
    free(r);
    ERR_clear_error(); /* this thread's OpenSSL queue starts clean next time */
}

/* libevent's part is over: the rest is judged from the loop, because the
 * connection it frees may be the one whose callback is running now. */
static void ended(struct httpc_req *r)
{
    r->ended = 1;
    event_del(r->deadline);
    event_del(r->ctimer);
    event_active(r->ev, EV_TIMEOUT, 1);
}

static int on_headers(struct evhttp_request *req, void *arg)
{
    struct httpc_req *r = arg;
    if (r->ended || r->status || evhttp_request_get_response_code(req) <= 0)
        return 0;
    r->status = evhttp_request_get_response_code(req);
    for (struct evkeyval *h = evhttp_request_get_input_headers(req)->tqh_first;
         h; h = h->next.tqe_next)
        if (evhttp_add_header(r->hdrs, h->key, h->value))
            return -1; /* out of memory: the request fails */
    return 0;
}

static void take_body(struct httpc_req *r, struct evhttp_request *req)
{
    struct evbuffer *b = evhttp_request_get_input_buffer(req);
    r->total += evbuffer_get_length(b);
    evbuffer_add_buffer(r->in, b);
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct httpc_req *r = arg;
    if (r->ended)
        return;
    on_headers(req, r);
    take_body(r, req);
    event_active(r->ev, EV_TIMEOUT, 1);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct httpc_req *r = arg;
    if (!r->ended)
        r->req_error = (int)e;
    /* libevent calls the request callback next (with NULL), then frees */
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct httpc_req *r = arg;
    if (r->ended)
        return;
    r->req = NULL; /* libevent frees it when we return */
    if (req && evhttp_request_get_response_code(req) > 0) {
        on_headers(req, r);
        take_body(r, req);
        r->complete = 1;
    }
    ended(r);
}

/* A timer cut the request short (end is HTTPC_END_TIMEOUT or
 * HTTPC_END_CONNECT_TIMEOUT): called from our own timers only. */
static void finish(struct httpc_req *r);

static void cut(struct httpc_req *r, int end)
{
    r->forced = end;
    r->ended = 1; /* the cancel's callbacks are ignored */
    lookup_drop(r);
    struct evhttp_request *req = r->req;
    r->req = NULL;
    if (req && r->handed)
        evhttp_cancel_request(req);
    else if (req)
        evhttp_request_free(req);
    event_del(r->deadline);
    event_del(r->ctimer);
    finish(r);
}

static int socket_connected(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    /* getpeername succeeds only on a connected socket, and unlike
     * SO_ERROR it leaves the pending error for libevent to read */
    return fd >= 0 && getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
}

static void close_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    close((int)(intptr_t)arg);
}

/* The watcher of the connect: it fires once, connected or failed. */
static void on_connected(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_req *r = arg;
    (void)what;
    if (socket_connected(fd)) {
        r->connected = 1;
        event_del(r->ctimer);
    }
    /* The duplicate is closed on the next turn of the loop, not now: on a
     * base with EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST (the daemon's) the
     * watcher's removal reaches epoll only when the loop next polls, and a
     * descriptor closed before then leaves its registration behind on the
     * socket (epoll keys it by the open file), reporting it writable on
     * every turn: a busy loop. A timer runs after that poll (1 us: with
     * 0, event_base_once would make it active in this very turn). */
    event_free(r->conn_ev);
    r->conn_ev = NULL;
    static const struct timeval soon = {0, 1};
    if (event_base_once(r->base, -1, EV_TIMEOUT, close_later,
                        (void *)(intptr_t)r->dupfd, &soon) != 0)
        close(r->dupfd); /* no timer: better a busy turn than a leak */
    r->dupfd = -1;
}

static void on_ctimer(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_req *r = arg;
    (void)fd, (void)what;
    /* without a watcher (no descriptor to spare), ask the socket */
    if (!r->connected && r->dupfd < 0 && r->evcon)
        r->connected = socket_connected(
            bufferevent_getfd(evhttp_connection_get_bufferevent(r->evcon)));
    if (!r->connected && !r->ended)
        cut(r, HTTPC_END_CONNECT_TIMEOUT);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_req *r = arg;
    (void)fd, (void)what;
    if (!r->ended)
        cut(r, HTTPC_END_TIMEOUT);
}

/* Fails the request before it reached libevent: judged from the loop. */
static void setup_fail(struct httpc_req *r, int rc, const char *msg)
{
    fo_err_set(&r->err, rc, "%s", msg);
    r->forced = HTTPC_END_SETUP;
    if (r->req && !r->handed)
        evhttp_request_free(r->req);
    r->req = NULL;
    ended(r);
}

/* Watches the socket's connect and arms the connect timer. */
static void watch_connect(struct httpc_req *r, struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0)
        r->dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->dupfd >= 0) {
        r->conn_ev = event_new(r->base, r->dupfd, EV_WRITE, on_connected, r);
        if (!r->conn_ev || event_add(r->conn_ev, NULL) != 0) {
            if (r->conn_ev)
                event_free(r->conn_ev);
            r->conn_ev = NULL;
            close(r->dupfd);
            r->dupfd = -1;
        }
    }
    if (r->connect_ms > 0 && r->connect_ms < r->timeout_ms && !r->connected) {
        struct timeval ct = tv_ms(r->connect_ms);
        evtimer_add(r->ctimer, &ct);
    }
}

/* The request has left: an EOF from now on is the end of the response
 * (libevent's READ_ON_WRITE_ERROR, there for a server that answers before
 * it read all of a request, would otherwise wait on a half-read answer
 * after the peer closed, until the deadline). */
static void out_cb(struct evbuffer *b, const struct evbuffer_cb_info *info,
                   void *arg)
{
    struct httpc_req *r = arg;
    /* evhttp writes a request only once its connection is up: bytes added
     * mean the connect succeeded (a peer that then resets it, before the
     * connect's watcher ran, leaves getpeername nothing to see) */
    if (info->n_added)
        r->connected = 1;
    if (info->n_deleted && evbuffer_get_length(b) == 0 && !r->sent_all &&
        r->evcon) {
        r->sent_all = 1;
        evhttp_connection_set_flags(r->evcon, 0);
    }
}

static void in_cb(struct evbuffer *b, const struct evbuffer_cb_info *info,
                  void *arg)
{
    struct httpc_req *r = arg;
    (void)b;
    if (info->n_added)
        r->got_bytes = r->connected = 1; /* a byte from the peer */
}

static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    struct httpc_req *r = arg;
    (void)evcon;
    r->conn_closed = 1;
}

/* Per request on its connection: libevent's limits and our watchers. */
static void conn_setup(struct httpc_req *r)
{
    /* libevent's own timer is a backstop only: ours decide */
    evhttp_connection_set_timeout(r->evcon, r->timeout_ms / 1000 + 5);
    evhttp_connection_set_max_body_size(r->evcon, (ev_ssize_t)r->body_max);
    evhttp_connection_set_max_headers_size(r->evcon,
                                           (ev_ssize_t)r->headers_max);
    /* a server may answer (413) and close before it read the whole body;
     * cleared by out_cb once all of the request left */
    evhttp_connection_set_flags(r->evcon, EVHTTP_CON_READ_ON_WRITE_ERROR);
    evhttp_connection_set_closecb(r->evcon, on_conn_closed, r);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
    r->outcb = evbuffer_add_cb(bufferevent_get_output(bev), out_cb, r);
    r->incb = evbuffer_add_cb(bufferevent_get_input(bev), in_cb, r);
}

/* Hands the request to its connection (new or reused). */
static void send_req(struct httpc_req *r, struct bufferevent *fresh)
{
    static const enum evhttp_cmd_type cmd[] = {EVHTTP_REQ_GET, EVHTTP_REQ_POST,
                                               EVHTTP_REQ_DELETE};
    conn_setup(r);
    r->handed = 1;
    if (evhttp_make_request(r->evcon, r->req, cmd[r->method], r->path) != 0) {
        r->req = NULL; /* libevent has freed the request */
        if (!r->ended)
            ended(r); /* judged as a failed connect */
        return;
    }
    if (r->ended) /* libevent failed it at once; the end is queued */
        return;
    if (fresh)
        watch_connect(r, fresh);
}

/* Makes a connection to addr (numeric) and sends the request on it. */
static void connect_start(struct httpc_req *r, const char *addr)
{
    if (addr != r->addr)
        snprintf(r->addr, sizeof(r->addr), "%s", addr);
    struct bufferevent *bev = NULL;
    if (r->tls) {
        r->ssl = ssl_for(r->tls, r->host);
        bev = r->ssl
                  ? bufferevent_openssl_socket_new(r->base, -1, r->ssl,
                                                   BUFFEREVENT_SSL_CONNECTING,
                                                   BEV_OPT_CLOSE_ON_FREE)
                  : NULL;
        if (!bev && r->ssl)
            SSL_free(r->ssl);
        if (bev)
            bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    } else {
        bev = bufferevent_socket_new(r->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    /* addr is numeric, so libevent's own resolution of it (no evdns base)
     * answers at once and the connect has begun when evhttp_make_request
     * returns */
    if (bev)
        r->evcon = evhttp_connection_base_bufferevent_new(
            r->base, NULL, bev, r->addr, (unsigned short)r->port);
    if (!r->evcon) {
        if (bev)
            bufferevent_free(bev);
        r->ssl = NULL;
        setup_fail(r, FO_E_NOMEM, "out of memory");
        return;
    }
    evhttp_connection_set_retries(r->evcon, 0);
    if (r->pool)
        r->pool->st.opened++;
    send_req(r, bev);
}

/* The first address of ai, numeric, into out; 0 when there is none. */
static int first_addr(const struct evutil_addrinfo *ai, char *out, size_t size)
{
    for (; ai; ai = ai->ai_next) {
        const void *src = NULL;
        if (ai->ai_family == AF_INET)
            src = &((const struct sockaddr_in *)(const void *)ai->ai_addr)
                       ->sin_addr;
        else if (ai->ai_family == AF_INET6)
            src = &((const struct sockaddr_in6 *)(const void *)ai->ai_addr)
                       ->sin6_addr;
        if (src && evutil_inet_ntop(ai->ai_family, src, out, size))
            return 1;
    }
    return 0;
}

static void on_resolved(int result, struct evutil_addrinfo *ai, void *arg)
{
    struct lookup *lk = arg;
    struct httpc_req *r = lk->r;
    char addr[INET6_ADDRSTRLEN];
    int found = result == 0 && first_addr(ai, addr, sizeof(addr));
    if (ai)
        evutil_freeaddrinfo(ai);
    free(lk);
    if (!r) /* the request let go of it */
        return;
    r->lookup = NULL;
    if (!found) {
        r->dns_error = result ? result : EVUTIL_EAI_NODATA;
        ended(r);
        return;
    }
    connect_start(r, addr);
}

static void lookup_start(struct httpc_req *r)
{
    struct lookup *lk = calloc(1, sizeof(*lk));
    if (!lk) {
        setup_fail(r, FO_E_NOMEM, "out of memory");
        return;
    }
    lk->r = r;
    r->lookup = lk;
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_flags = EVUTIL_AI_ADDRCONFIG,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_protocol = IPPROTO_TCP};
    struct evdns_getaddrinfo_request *q =
        evdns_getaddrinfo(r->dns, r->host, NULL, &hints, on_resolved, lk);
    /* NULL: the answer came at once (a hosts entry, an error) and lk is
     * gone; else the answer comes from the loop */
    if (q)
        lk->req = q;
}

/* What the end of a request that libevent finished was. */
static int judge(struct httpc_req *r)
{
    if (r->forced)
        return r->forced;
    if (r->dns_error)
        return HTTPC_END_DNS;
    if (r->ssl && !r->complete && r->verify == X509_V_OK)
        r->verify = SSL_get_verify_result(r->ssl);
    if (!r->complete && r->verify != X509_V_OK)
        return HTTPC_END_TLS;
    if (r->req_error == EVREQ_HTTP_DATA_TOO_LONG || r->total > r->body_max)
        return HTTPC_END_TOO_LARGE;
    if (r->complete)
        return HTTPC_END_OK;
    if (r->req_error == EVREQ_HTTP_INVALID_HEADER)
        return HTTPC_END_MALFORMED;
    if (!r->connected)
        return HTTPC_END_CONNECT;
    return HTTPC_END_CLOSED;
}

static void end_message(struct httpc_req *r, int end)
{
    const char *h = r->host;
    int p = r->port;
    switch (end) {
    case HTTPC_END_DNS:
        fo_err_set(&r->err, FO_E_UNAVAILABLE, "cannot look up %s: %s", h,
                   evutil_gai_strerror(r->dns_error));
        break;
    case HTTPC_END_CONNECT:
        fo_err_set(&r->err, FO_E_UNAVAILABLE, "cannot connect to %s:%d", h, p);
        break;
    case HTTPC_END_CONNECT_TIMEOUT:
        fo_err_set(&r->err, FO_E_UNAVAILABLE,
                   "connect to %s:%d timed out after %d ms", h, p,
                   r->connect_ms);
        break;
    case HTTPC_END_TIMEOUT:
        fo_err_set(&r->err, FO_E_TIMEOUT, "no answer from %s:%d within %d ms",
                   h, p, r->timeout_ms);
        break;
    case HTTPC_END_TLS:
        fo_err_set(&r->err, FO_E_UPSTREAM,
                   "tls: the certificate of %s did not verify: %s", h,
                   X509_verify_cert_error_string(r->verify));
        break;
    case HTTPC_END_TOO_LARGE:
        /* libevent 2.1 says the same of a corrupt chunked body */
        fo_err_set(&r->err, FO_E_UPSTREAM, "response over the %zu-byte cap%s",
                   r->body_max,
                   r->total > r->body_max ? ""
                                          : " (or a malformed chunked body)");
        break;
    case HTTPC_END_MALFORMED:
        fo_err_set(&r->err, FO_E_UPSTREAM,
                   "a malformed HTTP response from %s:%d", h, p);
        break;
    case HTTPC_END_CLOSED:
        if (r->status)
            fo_err_set(&r->err, FO_E_UNAVAILABLE,
                       "%s:%d closed the connection before its answer was "
                       "complete (status %d, %zu bytes of the body)",
                       h, p, r->status, r->total);
        else
            fo_err_set(&r->err, FO_E_UNAVAILABLE,
                       "the connection closed without an answer from %s:%d", h,
                       p);
        break;
    default:
        break;
    }
}

int httpc_end_code(const struct httpc_result *res)
{
    return res->end == HTTPC_END_OK ? FO_OK : res->err.code;
}

static int make_req(struct httpc_req *r);

/* Whether a failed request is tried once more on a fresh connection: it
 * failed on a reused connection that the peer closed (an EOF or a reset,
 * not a deadline, not a malformed answer), no byte of a response came,
 * and it is safe to send again: the method is idempotent (GET, DELETE, or
 * the request carries an Idempotency-Key header), or not all of the
 * request had left (a server never acts on a request it did not read
 * whole). A POST that was sent whole on a connection the peer closed at
 * that very moment is not retried: the server may have acted on it. */
static int retry_ok(const struct httpc_req *r)
{
    if (!r->reused || r->retried || r->forced || r->complete || r->status ||
        r->got_bytes || r->req_error != EVREQ_HTTP_EOF)
        return 0;
    return r->method != HTTPC_POST || !r->sent_all ||
           evhttp_find_header(r->oh, "Idempotency-Key") != NULL;
}

/* Starts the retry: 1 when it is under way, 0 when no time is left. */
static int retry(struct httpc_req *r)
{
    int64_t left = r->deadline_at - mono_ms();
    if (left <= 0)
        return 0;
    r->keep = 0;
    conn_release(r);
    r->retried = 1;
    r->reused = r->ended = r->connected = 0;
    r->sent_all = r->got_bytes = r->conn_closed = 0;
    r->req_error = -1;
    r->verify = X509_V_OK;
    struct timeval tv = tv_ms(left);
    evtimer_add(r->deadline, &tv);
    if (r->pool)
        r->pool->st.retried++;
    if (!make_req(r))
        setup_fail(r, FO_E_NOMEM, "out of memory");
    else
        connect_start(r, r->addr);
    return 1;
}

/* Tells done, then frees (the connection back to the pool when the
 * response came whole and framed, and the peer keeps it open). From the
 * request's own events only. */
static void finish(struct httpc_req *r)
{
    if (retry_ok(r) && retry(r))
        return;
    int end = judge(r);
    if (end != HTTPC_END_SETUP && end != HTTPC_END_OK)
        end_message(r, end);
    struct httpc_result res = {.end = end,
                               .status = r->status,
                               .connected = r->connected,
                               .dns_error = r->dns_error,
                               .verify = r->verify,
                               .headers = r->status ? r->hdrs : NULL,
                               .body = r->in,
                               .body_total = r->total,
                               .err = r->err};
    if (end == HTTPC_END_OK)
        fo_err_clear(&res.err);
    /* a body read to the close leaves no connection to keep */
    r->keep = end == HTTPC_END_OK && r->pool && !r->conn_closed &&
              (evhttp_find_header(r->hdrs, "Content-Length") ||
               evhttp_find_header(r->hdrs, "Transfer-Encoding"));
    r->finishing = 1;
    r->done(r->arg, &res);
    req_free(r);
}

static void on_event(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_req *r = arg;
    (void)fd, (void)what;
    if (r->on_chunk && r->status && evbuffer_get_length(r->in) > 0) {
        r->chunking = 1;
        r->on_chunk(r->arg, r, r->in);
        r->chunking = 0;
        if (r->cancelled) {
            req_free(r);
            return;
        }
    }
    if (r->ended)
        finish(r);
}

/* The request's headers and body, kept in r; 0 when out of memory or a
 * header libevent refuses (a line break in a value). */
static int build(struct httpc_req *r, const struct httpc_spec *s)
{
    struct evkeyvalq *h = r->oh;
    int bad = evhttp_add_header(h, "Host", s->url->host_header) ||
              (!s->pool && evhttp_add_header(h, "Connection", "close"));
    int ua = 0;
    for (size_t i = 0; !bad && i < s->n_headers; i++) {
        ua |= !strcasecmp(s->headers[i].name, "User-Agent");
        bad = evhttp_add_header(h, s->headers[i].name, s->headers[i].value);
    }
    if (!bad && !ua)
        bad = evhttp_add_header(h, "User-Agent", "forum/" FO_VERSION);
    if (!bad && (s->body || s->method != HTTPC_GET)) {
        char cl[32];
        snprintf(cl, sizeof(cl), "%zu", s->body ? s->body_len : 0);
        bad = evhttp_add_header(h, "Content-Length", cl);
        r->body_len = s->body ? s->body_len : 0;
        if (!bad && r->body_len) {
            bad = !(r->body = malloc(r->body_len));
            if (!bad)
                memcpy(r->body, s->body, r->body_len);
        }
    }
    return !bad;
}

/* The evhttp request from what build kept (again for a retry). */
static int make_req(struct httpc_req *r)
{
    r->handed = 0;
    r->req = evhttp_request_new(on_done, r);
    if (!r->req)
        return 0;
    evhttp_request_set_error_cb(r->req, on_error);
    evhttp_request_set_header_cb(r->req, on_headers);
    if (r->on_chunk)
        evhttp_request_set_chunked_cb(r->req, on_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
    for (struct evkeyval *e = r->oh->tqh_first; e; e = e->next.tqe_next)
        if (evhttp_add_header(h, e->key, e->value))
            return 0;
    return !r->body_len ||
           evbuffer_add(evhttp_request_get_output_buffer(r->req), r->body,
                        r->body_len) == 0;
}

static int pool_take(struct httpc_req *r);

/* A connection from the pool, else a new one (after a lookup when the
 * host is a name). */
static void begin(struct httpc_req *r, const char *addr)
{
    if (r->pool && pool_take(r)) {
        r->reused = r->connected = 1;
        send_req(r, NULL);
    } else if (addr) {
        connect_start(r, addr);
    } else {
        lookup_start(r);
    }
}

static int spec_check(const struct httpc_spec *s, struct fo_err *err)
{
    if (!s || !s->url || !s->done || s->timeout_ms <= 0 ||
        s->method < HTTPC_GET || s->method > HTTPC_DELETE)
        return fo_err_set(err, FO_E_INVALID,
                          "http request: no URL, callback or timeout");
    if (s->url->tls && !s->tls)
        return fo_err_set(err, FO_E_INVALID,
                          "http request: https without a TLS context");
    if (!s->url->addr && !s->dns)
        return fo_err_set(err, FO_E_INVALID, "host %s needs a resolver (dns)",
                          s->url->host);
    if (s->pool && s->pool->closing)
        return fo_err_set(err, FO_E_INVALID, "http request: a closed pool");
    return FO_OK;
}

int httpc_req_start(struct event_base *base, const struct httpc_spec *s,
                    struct httpc_req **out, struct fo_err *err)
{
    int rc = spec_check(s, err);
    if (rc)
        return rc;
    struct httpc_req *r = calloc(1, sizeof(*r));
    if (!r)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    r->dupfd = -1;
    r->req_error = -1;
    r->verify = X509_V_OK;
    r->base = base;
    r->dns = s->dns;
    r->tls = s->url->tls ? s->tls : NULL;
    r->port = s->url->port;
    r->method = s->method;
    r->connect_ms = s->connect_ms;
    r->timeout_ms = s->timeout_ms;
    r->body_max = s->body_max ? s->body_max : BODY_MAX_DEFAULT;
    r->headers_max = s->headers_max ? s->headers_max : HEADERS_MAX_DEFAULT;
    r->on_chunk = s->on_chunk;
    r->done = s->done;
    r->arg = s->arg;
    r->host = dup_str(s->url->host);
    r->path = dup_str(s->path ? s->path : s->url->path);
    r->in = evbuffer_new();
    r->hdrs = calloc(1, sizeof(*r->hdrs));
    r->oh = calloc(1, sizeof(*r->oh));
    r->deadline_at = mono_ms() + s->timeout_ms;
    if (s->pool && s->pool->base == base) {
        r->pool = s->pool;
        r->pool->live++;
    }
    r->ev = event_new(base, -1, 0, on_event, r);
    r->deadline = evtimer_new(base, on_deadline, r);
    r->ctimer = evtimer_new(base, on_ctimer, r);
    struct timeval dl = tv_ms(s->timeout_ms);
    if (!r->host || !r->path || !r->in || !r->hdrs || !r->oh || !r->ev ||
        !r->deadline || !r->ctimer || evtimer_add(r->deadline, &dl) != 0) {
        req_free(r);
        return fo_err_set(err, FO_E_NOMEM, NULL);
    }
    r->hdrs->tqh_first = NULL; /* TAILQ_INIT, which libevent keeps private */
    r->hdrs->tqh_last = &r->hdrs->tqh_first;
    r->oh->tqh_first = NULL;
    r->oh->tqh_last = &r->oh->tqh_first;
    if (!build(r, s) || !make_req(r))
        setup_fail(r, FO_E_INVALID,
                   "cannot build the request (a header value of more than "
                   "one line?)");
    else
        begin(r, s->url->addr);
    if (out)
        *out = r;
    return FO_OK;
}

void httpc_req_cancel(struct httpc_req *r)
{
    if (!r || r->finishing)
        return;
    if (r->chunking) { /* freed once on_chunk returns */
        r->cancelled = 1;
        return;
    }
    req_free(r);
}

int httpc_req_status(const struct httpc_req *r)
{
    return r->status;
}

const char *httpc_req_header(const struct httpc_req *r, const char *name)
{
    return r->status ? evhttp_find_header(r->hdrs, name) : NULL;
}

/* ---- the connection pool ------------------------------------------------- */

int httpc_pool_create(struct event_base *base, int max_idle, int idle_ms,
                      struct httpc_pool **out, struct fo_err *err)
{
    if (!base || max_idle < 0 || idle_ms < 0)
        return fo_err_set(err, FO_E_INVALID, "http pool: bad settings");
    struct httpc_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    p->base = base;
    p->max_idle = max_idle ? max_idle : HTTPC_POOL_IDLE_DEFAULT;
    p->idle_ms = idle_ms ? idle_ms : HTTPC_POOL_IDLE_MS_DEFAULT;
    *out = p;
    return FO_OK;
}

static void pconn_drop(struct pconn *pc)
{
    struct httpc_pool *p = pc->pool;
    for (struct pconn **pp = &p->idle; *pp; pp = &(*pp)->next)
        if (*pp == pc) {
            *pp = pc->next;
            break;
        }
    p->st.idle--;
    event_free(pc->timer);
    evhttp_connection_set_closecb(pc->evcon, NULL, NULL);
    evhttp_connection_free(pc->evcon);
    free(pc->host);
    free(pc);
}

static void pconn_expire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pconn_drop(arg);
}

/* The peer closed an idle connection (or sent what it should not): it is
 * dropped from the loop, outside libevent's callback. */
static void pconn_closed(struct evhttp_connection *evcon, void *arg)
{
    struct pconn *pc = arg;
    (void)evcon;
    event_active(pc->timer, EV_TIMEOUT, 1);
}

static void pool_free_now(struct httpc_pool *p)
{
    while (p->idle)
        pconn_drop(p->idle);
    free(p);
}

void httpc_pool_free(struct httpc_pool *p)
{
    if (!p)
        return;
    p->closing = 1;
    while (p->idle)
        pconn_drop(p->idle);
    if (p->live == 0)
        pool_free_now(p);
}

static void pool_unref(struct httpc_pool *p)
{
    if (--p->live == 0 && p->closing)
        pool_free_now(p);
}

void httpc_pool_get_stats(const struct httpc_pool *p,
                          struct httpc_pool_stats *out)
{
    *out = p->st;
}

/* An idle connection still open with nothing unread: the peer's close
 * (an EOF, a TLS close_notify) may be waiting unseen in the socket. */
static int pconn_alive(const struct pconn *pc)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(pc->evcon);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || evbuffer_get_length(bufferevent_get_input(bev)) > 0)
        return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* r's connection from the pool, the most recently used of its origin; 0
 * when there is none. */
static int pool_take(struct httpc_req *r)
{
    struct httpc_pool *p = r->pool;
    struct pconn *pc = p->idle, *next;
    for (; pc; pc = next) {
        next = pc->next;
        if (pc->tls != r->tls || pc->port != r->port ||
            strcasecmp(pc->host, r->host) != 0)
            continue;
        if (!pconn_alive(pc)) {
            p->st.stale++;
            pconn_drop(pc);
            continue;
        }
        break;
    }
    if (!pc)
        return 0;
    r->evcon = pc->evcon;
    r->ssl = pc->ssl;
    snprintf(r->addr, sizeof(r->addr), "%s", pc->addr);
    pc->evcon = NULL;
    for (struct pconn **pp = &p->idle; *pp; pp = &(*pp)->next)
        if (*pp == pc) {
            *pp = pc->next;
            break;
        }
    p->st.idle--;
    p->st.reused++;
    event_free(pc->timer);
    free(pc->host);
    free(pc);
    return 1;
}

/* r's connection into the pool (r->evcon is taken), or closed when the
 * origin has max_idle idle already or the pool is closing. */
static void pool_put(struct httpc_req *r)
{
    struct httpc_pool *p = r->pool;
    size_t same = 0;
    for (struct pconn *q = p->idle; q; q = q->next)
        same += q->tls == r->tls && q->port == r->port &&
                !strcasecmp(q->host, r->host);
    struct pconn *pc = NULL;
    struct timeval tv = tv_ms(p->idle_ms);
    if (!p->closing && same < (size_t)p->max_idle &&
        (pc = calloc(1, sizeof(*pc))) && (pc->host = dup_str(r->host)) &&
        (pc->timer = evtimer_new(p->base, pconn_expire, pc)) &&
        evtimer_add(pc->timer, &tv) == 0) {
        pc->pool = p;
        pc->evcon = r->evcon;
        pc->ssl = r->ssl;
        pc->tls = r->tls;
        pc->port = r->port;
        snprintf(pc->addr, sizeof(pc->addr), "%s", r->addr);
        evhttp_connection_set_closecb(pc->evcon, pconn_closed, pc);
        pc->next = p->idle;
        p->idle = pc;
        p->st.idle++;
        return;
    }
    if (pc) {
        if (pc->timer)
            event_free(pc->timer);
        free(pc->host);
        free(pc);
    }
    evhttp_connection_free(r->evcon);
}

/* ---- blocking ------------------------------------------------------------ */

struct fetch {
    struct httpc_reply *out;
    struct fo_err *err;
    int rc, done;
};

static void fetch_done(void *arg, struct httpc_result *res)
{
    struct fetch *f = arg;
    f->done = 1;
    f->rc = httpc_end_code(res);
    if (f->rc) {
        if (f->err)
            *f->err = res->err;
        return;
    }
    size_t n = evbuffer_get_length(res->body);
    char *b = malloc(n + 1);
    if (!b) {
        f->rc = fo_err_set(f->err, FO_E_NOMEM, NULL);
        return;
    }
    evbuffer_remove(res->body, b, n);
    b[n] = '\0';
    f->out->status = res->status;
    f->out->body = b;
    f->out->len = n;
}

int httpc_fetch(const struct httpc_spec *spec, struct httpc_reply *out,
                struct fo_err *err)
{
    *out = (struct httpc_reply){0};
    struct httpc_spec s = *spec;
    struct fetch f = {.out = out, .err = err};
    struct httpc_tls *tls = NULL;
    struct evdns_base *dns = NULL;
    struct event_base *base = event_base_new();
    int rc = base ? FO_OK
                  : fo_err_set(err, FO_E_NOMEM, "cannot create an event base");
    if (!rc && s.url && !s.url->addr && !s.dns &&
        !(rc = httpc_dns_create(base, &dns, err)))
        s.dns = dns;
    if (!rc && s.url && s.url->tls && !s.tls &&
        !(rc = httpc_tls_create(NULL, &tls, err)))
        s.tls = tls;
    s.on_chunk = NULL;
    s.pool = NULL; /* the base is this call's own */
    s.done = fetch_done;
    s.arg = &f;
    if (!rc)
        rc = httpc_req_start(base, &s, NULL, err);
    if (!rc) {
        while (!f.done)
            if (event_base_loop(base, EVLOOP_ONCE) != 0)
                break;
        rc = f.done ? f.rc
                    : fo_err_set(err, FO_E_INTERNAL, "http: the loop stopped");
        /* evdns answers cancelled lookups from the loop; let it, so that
         * nothing is left for event_base_free to drop */
        for (int i = 0; i < 8 && event_base_get_num_events(
                                     base, EVENT_BASE_COUNT_ACTIVE) > 0;
             i++)
            event_base_loop(base, EVLOOP_NONBLOCK);
    }
    if (dns)
        evdns_base_free(dns, 0);
    if (base)
        event_base_free(base);
    httpc_tls_free(tls);
    return rc;
}

void httpc_reply_release(struct httpc_reply *r)
{
    if (!r)
        return;
    free(r->body);
    *r = (struct httpc_reply){0};
}

/* ---- Server-Sent Events -------------------------------------------------- */

void httpc_sse_init(struct httpc_sse *s, size_t data_max)
{
    memset(s, 0, sizeof(*s));
    fo_buf_init(&s->data, data_max);
    fo_buf_init(&s->line, data_max + 16);
}

void httpc_sse_release(struct httpc_sse *s)
{
    fo_buf_release(&s->data);
    fo_buf_release(&s->line);
}

/* One complete line (s->line); 0, or -1 when the data is over its cap. */
static int sse_field(struct httpc_sse *s)
{
    const char *l = s->line.data ? s->line.data : "";
    size_t n = s->line.len;
    if (n == 0 || l[0] == ':')
        return 0;
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    if (colon && v < l + n && *v == ' ')
        v++;
    size_t vl = (size_t)(l + n - v);
    if (fl == 4 && !memcmp(l, "data", 4)) {
        int bad = (s->has_data && fo_buf_putc(&s->data, '\n')) ||
                  fo_buf_append(&s->data, v, vl);
        s->has_data = 1;
        return bad ? -1 : 0;
    }
    if (fl == 5 && !memcmp(l, "event", 5))
        snprintf(s->event, sizeof(s->event), "%.*s", (int)vl, v);
    else if (fl == 2 && !memcmp(l, "id", 2) && !memchr(v, '\0', vl))
        snprintf(s->id, sizeof(s->id), "%.*s", (int)vl, v);
    return 0; /* retry: and unknown fields change nothing here */
}

/* The blank line: the event, if it has data. */
static int sse_dispatch(struct httpc_sse *s, httpc_sse_fn ev, void *arg)
{
    if (!s->has_data) {
        s->event[0] = '\0';
        return 0;
    }
    if (fo_buf_putc(&s->data, '\0'))
        return -1;
    char type[sizeof(s->event)];
    snprintf(type, sizeof(type), "%s", s->event[0] ? s->event : "message");
    /* the state is reset first: ev may stop the reading, or free s */
    const char *data = s->data.data;
    size_t len = s->data.len - 1;
    s->data.len = 0; /* the bytes stay until the next data line */
    s->event[0] = '\0';
    s->has_data = 0;
    return ev(arg, type, data, len);
}

int httpc_sse_feed(struct httpc_sse *s, struct evbuffer *in, httpc_sse_fn ev,
                   void *arg)
{
    for (;;) {
        size_t n = evbuffer_get_length(in);
        if (n == 0)
            return 0;
        const unsigned char *p = evbuffer_pullup(in, -1);
        if (!p)
            return -1;
        if (s->cr) { /* a CRLF split across two reads */
            s->cr = 0;
            if (p[0] == '\n') {
                evbuffer_drain(in, 1);
                continue;
            }
        }
        size_t i = 0;
        while (i < n && p[i] != '\r' && p[i] != '\n')
            i++;
        if (fo_buf_append(&s->line, p, i) != FO_OK)
            return -1;
        if (i == n) { /* the rest of the line is to come */
            evbuffer_drain(in, n);
            return 0;
        }
        s->cr = p[i] == '\r';
        evbuffer_drain(in, i + 1);
        int r = s->line.len ? sse_field(s) : sse_dispatch(s, ev, arg);
        if (r) /* s may be gone */
            return r;
        fo_buf_reset(&s->line);
    }
}
