/* http_guard: Host, Origin and Content-Type checks for the HTTP surface
 * (see http_guard.h). A browser sends a cross-site form or a no-cors fetch
 * with a Content-Type we refuse and an Origin we refuse; a page that
 * rebinds its own name to 127.0.0.1 sends its name as Host, which we
 * refuse. Clients outside a browser (curl, the CLI, SDKs) send a Host that
 * is our address and no Origin. */
#include "surfaces/http_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "ledger/fo_buf.h"

#define NAME_MAX_LEN 255

/* host[:port] or [v6][:port] into name (brackets dropped) and *port (-1:
 * none). 0, or -1 when malformed. */
static int split_authority(const char *a, size_t n, char *name, size_t size,
                           long *port)
{
    const char *colon = NULL;
    const char *h = a;
    size_t hl;
    *port = -1;
    if (n && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close)
            return -1;
        h = a + 1;
        hl = (size_t)(close - h);
        size_t rest = n - (size_t)(close + 1 - a);
        if (rest && close[1] != ':')
            return -1;
        if (rest)
            colon = close + 1;
    } else {
        colon = memchr(a, ':', n);
        hl = colon ? (size_t)(colon - a) : n;
    }
    if (!hl || hl >= size)
        return -1;
    if (colon) {
        const char *p = colon + 1, *end = a + n;
        if (p == end || end - p > 5)
            return -1;
        long v = 0;
        for (; p < end; p++) {
            if (*p < '0' || *p > '9')
                return -1;
            v = v * 10 + (*p - '0');
        }
        if (v > 65535)
            return -1;
        *port = v;
    }
    memcpy(name, h, hl);
    name[hl] = '\0';
    if (hl > 1 && name[hl - 1] == '.') /* "localhost." is localhost */
        name[hl - 1] = '\0';
    for (char *c = name; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u <= ' ' || u == '/' || u == '@' || u >= 0x7f)
            return -1;
    }
    return 0;
}

/* An IP literal: 4 or 6 (its bytes in out), 0 when not one. */
static int ip_literal(const char *s, unsigned char out[16])
{
    if (inet_pton(AF_INET, s, out) == 1)
        return 4;
    if (inet_pton(AF_INET6, s, out) == 1)
        return 6;
    return 0;
}

static int ip_loopback(int fam, const unsigned char *a)
{
    static const unsigned char one6[16] = {[15] = 1};
    if (fam == 4)
        return a[0] == 127;
    if (!memcmp(a, one6, 16))
        return 1;
    /* ::ffff:127.x.y.z */
    static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
    return !memcmp(a, mapped, 12) && a[12] == 127;
}

int surf_http_host_allowed(const struct surf_http_hosts *hs, const char *name)
{
    if (!strcasecmp(name, "localhost"))
        return 1;
    const char *listen = hs->listen ? hs->listen : "127.0.0.1";
    unsigned char a[16], l[16];
    int fam = ip_literal(name, a);
    if (fam) {
        /* an address is never a rebinding: accept loopback, and the
         * address we listen on (any, on a wildcard bind) */
        if (ip_loopback(fam, a))
            return 1;
        int lf = ip_literal(listen, l);
        if (!lf)
            return 0;
        static const unsigned char zero[16];
        if (!memcmp(l, zero, lf == 4 ? 4 : 16))
            return 1;
        return lf == fam && !memcmp(a, l, fam == 4 ? 4 : 16);
    }
    if (!strcasecmp(name, listen))
        return 1;
    for (size_t i = 0; i < hs->n_names; i++)
        if (hs->names[i] && !strcasecmp(name, hs->names[i]))
            return 1;
    return 0;
}

/* 1 when name is one of the configured --allowed-host names. */
static int named(const struct surf_http_hosts *hs, const char *name)
{
    for (size_t i = 0; i < hs->n_names; i++)
        if (hs->names[i] && !strcasecmp(name, hs->names[i]))
            return 1;
    return 0;
}

/* Origin: scheme "://" authority, nothing after. */
static int origin_ok(const struct surf_http_hosts *hs, const char *origin,
                     const char *host_hdr, struct fo_err *err)
{
    const char *sep = strstr(origin, "://");
    long def_port = -1;
    if (sep && (size_t)(sep - origin) == 4 && !strncasecmp(origin, "http", 4))
        def_port = 80;
    else if (sep && (size_t)(sep - origin) == 5 &&
             !strncasecmp(origin, "https", 5))
        def_port = 443;
    char name[NAME_MAX_LEN + 1];
    long port = -1;
    if (def_port < 0 || split_authority(sep + 3, strlen(sep + 3), name,
                                        sizeof(name), &port) != 0)
        return fo_err_set(err, FO_E_FORBIDDEN_ORIGIN,
                          "Origin %.80s: a cross-site request is refused "
                          "(only pages served by this daemon may call it)",
                          origin);
    if (port < 0)
        port = def_port;
    if (named(hs, name))
        return FO_OK; /* a name the operator gave: a proxy in front */
    if (surf_http_host_allowed(hs, name)) {
        /* our host, and our port (the one Host names, or the bound one) */
        char hname[NAME_MAX_LEN + 1];
        long hport = -1;
        if (host_hdr &&
            split_authority(host_hdr, strlen(host_hdr), hname, sizeof(hname),
                            &hport) == 0 &&
            hport < 0)
            hport = 80;
        if (port == hport || port == hs->port)
            return FO_OK;
    }
    return fo_err_set(err, FO_E_FORBIDDEN_ORIGIN,
                      "Origin %.80s: a cross-site request is refused (only "
                      "pages served by this daemon may call it; a proxy's "
                      "public name goes in --allowed-host)",
                      origin);
}

int surf_http_guard_hosts(const struct surf_http_hosts *hs, const char *host,
                          int n_host, const char *origin, struct fo_err *err)
{
    if (n_host > 1)
        return fo_err_set(err, FO_E_MISDIRECTED, "Host: sent %d times", n_host);
    if (host) {
        char name[NAME_MAX_LEN + 1];
        long port;
        if (split_authority(host, strlen(host), name, sizeof(name), &port) != 0)
            return fo_err_set(err, FO_E_MISDIRECTED, "Host %.80s: malformed",
                              host);
        if (!surf_http_host_allowed(hs, name))
            return fo_err_set(
                err, FO_E_MISDIRECTED,
                "Host %.80s: not a name this daemon answers as (a page "
                "rebinding its name to this address?); add it with serve "
                "--allowed-host %.80s if it is yours",
                host, name);
    }
    if (origin)
        return origin_ok(hs, origin, host, err);
    return FO_OK;
}

int surf_http_guard_ctype(const char *ctype, struct fo_err *err)
{
    static const char want[] = "application/json";
    if (ctype) {
        while (*ctype == ' ' || *ctype == '\t')
            ctype++;
        size_t n = sizeof(want) - 1;
        if (!strncasecmp(ctype, want, n)) {
            const char *p = ctype + n;
            while (*p == ' ' || *p == '\t')
                p++;
            if (!*p || *p == ';')
                return FO_OK;
        }
    }
    if (!ctype)
        return fo_err_set(err, FO_E_MEDIA_TYPE,
                          "no Content-Type: a write must be sent as "
                          "Content-Type: application/json");
    return fo_err_set(err, FO_E_MEDIA_TYPE,
                      "Content-Type %.60s: a write must be sent as "
                      "Content-Type: application/json",
                      ctype);
}
