/* httpc: the one HTTP/1.1 client of the daemon and the CLI (model
 * providers, MCP servers over Streamable HTTP, witness submissions, the
 * CLI's calls to its daemon, `forum verify --tiles URL`), on libevent's
 * evhttp. http and https (bufferevent_openssl; the peer is always
 * verified), host names looked up with evdns, deadlines of its own for the
 * connect and for the whole request, a cap on the response, the body
 * whole or as it arrives, cancel. A request is a small state machine on a
 * caller's event_base and never blocks it; httpc_fetch runs one to its end
 * on a private base, for the CLI. Server-Sent Events are read by the
 * incremental parser at the end. */
#ifndef DAEMON_HTTPC_H
#define DAEMON_HTTPC_H

#include <stddef.h>
#include <stdint.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_err.h"

struct event_base; /* event2/event.h */
struct evdns_base; /* event2/dns.h */
struct evbuffer;   /* event2/buffer.h */
struct evkeyvalq;  /* event2/keyvalq_struct.h */

/* ---- URLs ---------------------------------------------------------------- */

#define HTTPC_URL_MAX 2048

/* A URL split for a request. All strings are malloc'd. */
struct httpc_url {
    int tls;    /* https */
    int port;   /* given, or the scheme's 80 / 443 */
    char *host; /* as written, IPv6 without its brackets */
    /* what to connect to without a lookup: the host itself when it is an IP
     * literal, 127.0.0.1 for "localhost" (RFC 6761; local servers listen
     * there); NULL for a name evdns looks up */
    char *addr;
    char *path;        /* the path ("/" when none) with "?query" */
    char *host_header; /* the Host header: host, [v6], ":port" unless the
                          scheme's default */
};

/* Parses url: http:// or https:// (any case), a host (a name, an IPv4
 * address, or an IPv6 address in brackets), an optional port 1-65535, a
 * path and a query. FO_E_INVALID saying why, without the URL itself (the
 * caller adds its context): over HTTPC_URL_MAX bytes, not a URL (spaces,
 * controls, a bad port), another scheme, no host, user info or a fragment.
 * out may be NULL (a check only); else release it with httpc_url_release.
 * FO_E_NOMEM. */
int httpc_url_parse(const char *url, struct httpc_url *out, struct fo_err *err);

/* Frees the strings of u and zeroes it. NULL-safe, idempotent. */
void httpc_url_release(struct httpc_url *u);

/* "scheme://host_header" + path into out (for messages); cap bytes. */
void httpc_url_text(const struct httpc_url *u, const char *path, char *out,
                    size_t cap);

/* ---- TLS and DNS --------------------------------------------------------- */

/* The one TLS client policy: the peer's certificate is verified
 * (SSL_VERIFY_PEER) against the host name (SSL_set1_host, with SNI) or IP
 * address it was asked for, TLS 1.2 at least, an unexpected EOF is the end
 * of the stream it closes (the reply's own framing decides whether it is
 * complete), idle connections give their record buffers back. The trusted
 * CAs: ca_file (PEM) when not NULL, else the system store (OpenSSL's
 * default paths, which the SSL_CERT_FILE and SSL_CERT_DIR environment
 * variables replace). Immutable once made: any number of requests on any
 * threads may share it. FO_E_IO naming the file when the CAs cannot be
 * loaded, FO_E_NOMEM. */
struct httpc_tls;
int httpc_tls_create(const char *ca_file, struct httpc_tls **out,
                     struct fo_err *err);
void httpc_tls_free(struct httpc_tls *t); /* NULL-safe */

/* A resolver on base, as the C library's: the name servers, search list
 * and options of /etc/resolv.conf (without the file, a name server on
 * 127.0.0.1) and /etc/hosts. Idle, it holds no event on base. Free it with
 * evdns_base_free(dns, 0) once no request that uses it is in flight and
 * the loop has run after the last one ended (evdns answers a cancelled
 * lookup on a later turn). FO_E_IO (resolv.conf cannot be read),
 * FO_E_NOMEM. */
int httpc_dns_create(struct event_base *base, struct evdns_base **out,
                     struct fo_err *err);

/* ---- one request on an event_base ---------------------------------------- */

enum httpc_method { HTTPC_GET, HTTPC_POST, HTTPC_DELETE };

/* How a request ended. */
enum httpc_end {
    HTTPC_END_OK,              /* the whole response came (any status) */
    HTTPC_END_SETUP,           /* it could not be made (out of memory, a header
                                  libevent refused): the result's err says */
    HTTPC_END_DNS,             /* the host name did not resolve (dns_error) */
    HTTPC_END_CONNECT,         /* no connection (refused, unreachable) */
    HTTPC_END_CONNECT_TIMEOUT, /* not connected within connect_ms */
    HTTPC_END_TIMEOUT,         /* not over within timeout_ms */
    HTTPC_END_TLS,             /* the certificate or host name did not verify */
    HTTPC_END_TOO_LARGE,       /* a body over body_max (libevent 2.1 says the
                                  same of a corrupt chunked body) */
    HTTPC_END_MALFORMED,       /* the reply is not HTTP */
    HTTPC_END_CLOSED,          /* connected, and closed before the response
                                  was complete */
};

struct httpc_header {
    const char *name, *value;
};

struct httpc_req;

/* ---- the connection pool ------------------------------------------------- */

/* Keep-alive connections for the requests of one event_base, reused per
 * origin: scheme (and TLS context), host as written, port. A connection
 * goes back to the pool only when its response came whole with its own
 * framing (Content-Length or chunked) and the peer did not close it or
 * ask to ("Connection: close"); a connection that failed, was cancelled or
 * was closed is never reused. At most max_idle idle connections per origin
 * (more are closed), each closed after idle_ms without a request or as
 * soon as the peer closes it. A connection taken from the pool is checked
 * first (a peek at its socket: an EOF or any unread byte drops it).
 *
 * The retry rule: a request that fails on a reused connection because the
 * peer closed it (EOF or reset, no byte of a response back) is sent once
 * more on a fresh connection, within its own deadline, when that is safe:
 * the method is GET or DELETE, or it carries an Idempotency-Key header, or
 * not all of the request had left (no server acts on a request it did not
 * read whole). A POST sent whole on a connection the peer closed at that
 * moment fails (HTTPC_END_CLOSED): the server may have acted on it.
 *
 * A pool is used on its base's thread only. */
#define HTTPC_POOL_IDLE_DEFAULT 16       /* idle connections per origin */
#define HTTPC_POOL_IDLE_MS_DEFAULT 30000 /* closed after this idle time */

struct httpc_pool;

struct httpc_pool_stats {
    uint64_t opened;  /* connections made by its requests */
    uint64_t reused;  /* requests sent on a pooled connection */
    uint64_t stale;   /* pooled connections found closed when taken */
    uint64_t retried; /* requests sent again on a fresh connection */
    uint64_t idle;    /* idle connections now */
};

/* max_idle, idle_ms: 0 for the defaults. FO_E_INVALID, FO_E_NOMEM. */
int httpc_pool_create(struct event_base *base, int max_idle, int idle_ms,
                      struct httpc_pool **out, struct fo_err *err);
/* Closes the idle connections; requests in flight finish on theirs (which
 * are closed then), and the pool is freed after the last one. No request
 * may be started on it after. NULL-safe. */
void httpc_pool_free(struct httpc_pool *p);
void httpc_pool_get_stats(const struct httpc_pool *p,
                          struct httpc_pool_stats *out);

/* What came. Valid during the callback only. */
struct httpc_result {
    int end;       /* enum httpc_end */
    int status;    /* the HTTP status once headers came, else 0 (it may be set
                      with an end other than OK: the stream broke later) */
    int connected; /* the TCP connect completed */
    int dns_error; /* an EVUTIL_EAI_ code for END_DNS */
    long verify;   /* an X509_V_ code for END_TLS */
    const struct evkeyvalq *headers; /* the response's, NULL before them */
    struct evbuffer *body; /* what came and was not streamed (see on_chunk);
                              never NULL */
    size_t body_total;     /* bytes of body received in all */
    struct fo_err err;     /* a sentence for every end but OK, naming the
                              host and port ("cannot connect to h:80") */
};

/* Streaming: called from the loop each time body bytes have arrived (and
 * once more, if any are left, just before done), with the status and the
 * headers known (httpc_req_status, httpc_req_header). It consumes what it
 * wants of data (evbuffer_drain, evbuffer_readln, ...); what it leaves
 * stays for the next call and for done. It may cancel the request
 * (httpc_req_cancel): nothing is called after. */
typedef void (*httpc_chunk_fn)(void *arg, struct httpc_req *r,
                               struct evbuffer *data);

/* Called exactly once per started request, from the loop (never from
 * inside httpc_req_start), unless it is cancelled first. The request is
 * freed when done returns; done may start and cancel others. */
typedef void (*httpc_done_fn)(void *arg, struct httpc_result *res);

struct httpc_spec {
    int method;                         /* enum httpc_method */
    const struct httpc_url *url;        /* read during httpc_req_start only */
    const char *path;                   /* NULL: url->path */
    const struct httpc_header *headers; /* besides Host, Content-Length */
    size_t n_headers;
    const char *body; /* copied; may be NULL */
    size_t body_len;
    const struct httpc_tls *tls; /* required for https; kept by the caller
                                    until the request ends (and, pooled,
                                    until the pool is freed) */
    struct httpc_pool *pool;     /* NULL: one connection for the request,
                                    "Connection: close"; else a keep-alive
                                    connection from (and back to) the pool
                                    (one of another base is not used) */
    struct evdns_base *dns;      /* required when url->addr is NULL */
    int connect_ms;              /* the TCP connect; 0: only timeout_ms */
    int timeout_ms;              /* the lookup, connect, TLS, request and the
                                    response to its last byte; > 0 */
    size_t body_max;         /* the response body's cap (all of it, streamed or
                                not); 0: 4 MiB */
    size_t headers_max;      /* 0: 64 KiB */
    httpc_chunk_fn on_chunk; /* NULL: the body comes whole to done */
    httpc_done_fn done;
    void *arg;
};

/* Starts the request of spec on base and returns at once: lookup,
 * connect, TLS, send and receive are all events on base, on a connection
 * of spec's pool or one made for it (closed after), retried only as the
 * pool's rule says. Call it on the thread that
 * runs base. On FO_OK done will be called once (unless cancelled) and *out
 * (out may be NULL) is the handle until then. Errors here mean nothing
 * started and done will not be called: FO_E_INVALID (no done, timeout_ms
 * not positive, https without tls, a name to look up without dns),
 * FO_E_NOMEM. Every later failure comes to done. */
int httpc_req_start(struct event_base *base, const struct httpc_spec *spec,
                    struct httpc_req **out, struct fo_err *err);

/* Ends a request in flight at once: closes its connection (never pooled), lets
 * go of its lookup, frees it; nothing more is called. Safe from any callback on
 * the base's thread, on_chunk included; inside the request's own done it does
 * nothing. NULL-safe. A lookup it cancels is answered by evdns on a later
 * loop iteration: run the loop once more before freeing dns. */
void httpc_req_cancel(struct httpc_req *r);

/* The status (0 before the headers) and a response header (NULL when
 * absent), for on_chunk. */
int httpc_req_status(const struct httpc_req *r);
const char *httpc_req_header(const struct httpc_req *r, const char *name);

/* The FO_E_ code for a failed end: TIMEOUT for the deadline, UNAVAILABLE
 * for lookups, connects and dropped connections, UPSTREAM for TLS, an
 * oversize or malformed reply; the SETUP error's own code. */
int httpc_end_code(const struct httpc_result *res);

/* ---- one request, blocking ----------------------------------------------- */

struct httpc_reply {
    int status;
    char *body; /* malloc'd, NUL-terminated (len bytes before it) */
    size_t len;
};

/* Runs spec (its done, arg and on_chunk are ignored; dns may be NULL: one
 * is made when the host is a name; tls may be NULL: one with the system
 * store is made for https) to its end on a private event_base: it blocks
 * the calling thread (never the daemon's loop) for at most timeout_ms.
 * FO_OK when a response came (any status; out set, release it with
 * httpc_reply_release); else the error of httpc_end_code and its sentence,
 * FO_E_IO when the CA store cannot be loaded, FO_E_NOMEM. */
int httpc_fetch(const struct httpc_spec *spec, struct httpc_reply *out,
                struct fo_err *err);
void httpc_reply_release(struct httpc_reply *r);

/* ---- Server-Sent Events -------------------------------------------------- */

/* An incremental reader of text/event-stream (WHATWG HTML, "Server-sent
 * events"): lines end in CRLF, LF or CR; "data:" lines of an event are
 * joined with "\n", one space after the colon dropped; "event:" sets the
 * type, "id:" the last event id; comments and "retry:" are skipped; a
 * blank line dispatches an event that has data. */
struct httpc_sse {
    struct fo_buf data; /* the data of the event being read */
    char event[64];     /* its type; "" means "message" */
    char id[256];       /* the last event id seen */
    int has_data;       /* a data line came for this event */
    struct fo_buf line; /* a line not yet ended */
    int cr;             /* the last byte read was a CR */
};

/* data_max caps one event's data (and one line). */
void httpc_sse_init(struct httpc_sse *s, size_t data_max);
void httpc_sse_release(struct httpc_sse *s);

/* Called for each complete event: data (len bytes, NUL-terminated), type
 * ("message" when none was given). Returns 0 to go on, anything else to
 * stop (httpc_sse_feed returns it at once; the rest stays unread, and the
 * reader may be released, or fed again). */
typedef int (*httpc_sse_fn)(void *arg, const char *type, const char *data,
                            size_t len);

/* Reads what is in in (consumed), calling ev for each event completed.
 * Returns 0, ev's non-zero value, or -1 when an event or line is over
 * data_max (FO_E_TOO_LARGE in a caller's terms). */
int httpc_sse_feed(struct httpc_sse *s, struct evbuffer *in, httpc_sse_fn ev,
                   void *arg);

#endif
