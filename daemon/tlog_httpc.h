/* tlog_httpc: one HTTP POST on the daemon's event loop, for the public
 * log's witness submissions (C2SP tlog-witness add-checkpoint). Never
 * blocks: host names are looked up with evdns, the connection is libevent's,
 * and one deadline covers the lookup, the connect and the reply. Plain
 * http:// only. Kept apart so the daemon's HTTP clients can become one. */
#ifndef DAEMON_TLOG_HTTPC_H
#define DAEMON_TLOG_HTTPC_H

#include <stddef.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "ledger/fo_err.h"

/* The longest reply body read. */
#define TLOG_HTTPC_BODY_MAX (64 * 1024)

struct tlog_httpc;

/* Called once on the loop thread when the request ends: status is the HTTP
 * status, or -1 when no reply came (then why says: refused, timed out,
 * reset); body is the reply body (len bytes, NUL-terminated; valid during
 * the call only). The request is freed when done returns. */
typedef void (*tlog_httpc_done_fn)(void *arg, int status, const char *body,
                                   size_t len, const char *why);

/* Checks url: "http://HOST[:PORT][/PREFIX]" (no query, no fragment).
 * FO_E_INVALID saying why. */
int tlog_httpc_url_check(const char *url, struct fo_err *err);

/* POSTs body (len bytes, copied) with Content-Type ctype to url + path
 * (url as tlog_httpc_url_check; path starts with '/'). dns may be NULL
 * (then HOST must be numeric). On FO_OK *out is the request and done will
 * be called once, from the loop (never from inside this call), unless
 * tlog_httpc_cancel comes first. */
int tlog_httpc_post(struct event_base *base, struct evdns_base *dns,
                    const char *url, const char *path, const char *ctype,
                    const char *body, size_t len, int timeout_ms,
                    tlog_httpc_done_fn done, void *arg, struct tlog_httpc **out,
                    struct fo_err *err);

/* Abandons a request in flight: done is not called. NULL-safe. */
void tlog_httpc_cancel(struct tlog_httpc *r);

#endif
