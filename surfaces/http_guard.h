/* http_guard: the checks that keep a web page from using the HTTP surface
 * through a browser (cross-site request forgery, DNS rebinding), with or
 * without a token: the Host a request names, its Origin, and the media
 * type of a write. Pure functions of the request's headers. */
#ifndef SURF_HTTP_GUARD_H
#define SURF_HTTP_GUARD_H

#include <stddef.h>

#include "ledger/fo_err.h"

/* The names and addresses this server answers as. */
struct surf_http_hosts {
    const char *listen;       /* the listen address (a name or an IP literal) */
    int port;                 /* the bound port */
    const char *const *names; /* --allowed-host names (case-insensitive) */
    size_t n_names;
};

/* Whether a request with these headers (host and origin may be NULL: not
 * sent; n_host is how many Host headers came) may reach any route. FO_OK;
 * FO_E_MISDIRECTED when Host names a host this server does not answer as
 * (a DNS-rebinding page, or a proxy that needs --allowed-host), or came
 * twice; FO_E_FORBIDDEN_ORIGIN when Origin is present and is not this
 * server. The message names the header and what to do. */
int surf_http_guard_hosts(const struct surf_http_hosts *hs, const char *host,
                          int n_host, const char *origin, struct fo_err *err);

/* Whether a write (any method but GET and HEAD) may go on: its
 * Content-Type must be application/json (parameters such as charset
 * allowed), which no HTML form and no "simple" cross-origin fetch can
 * send. FO_OK or FO_E_MEDIA_TYPE. ctype may be NULL (not sent). */
int surf_http_guard_ctype(const char *ctype, struct fo_err *err);

/* 1 when name (no port, no brackets) is one this server answers as. */
int surf_http_host_allowed(const struct surf_http_hosts *hs, const char *name);

#endif
