/* cli_httpc: a minimal blocking HTTP/1.1 client for talking to our own
 * daemon (`serve status`, `serve start`'s readiness check, tests). One
 * request per connection, deadlines on connect and on the whole reply. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ledger/fo_buf.h"
#include "ledger/ledger.h"

#define REPLY_MAX (64u << 20)

static int wait_fd(int fd, short ev, int64_t deadline_us)
{
    for (;;) {
        int64_t left = (deadline_us - ledger_now_us()) / 1000;
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static int connect_to(const char *host, int port, int64_t deadline,
                      struct fo_err *err)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return -fo_err_set(err, FO_E_IO, "%s: %s", host, gai_strerror(g));
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 1) {
            int e = 0;
            socklen_t el = sizeof(e);
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
                break;
            errno = e;
        }
        close(fd);
        fd = -1;
    }
    int saved = errno;
    freeaddrinfo(res);
    if (fd < 0)
        return -fo_err_set(err, FO_E_UNAVAILABLE, "cannot connect to %s:%d: %s",
                           host, port, strerror(saved));
    return fd;
}

int cli_http_request(const char *host, int port, const char *method,
                     const char *path, const char *token, const char *body,
                     size_t body_len, int timeout_ms, int *status, char **out,
                     size_t *out_len, struct fo_err *err)
{
    int64_t deadline = ledger_now_us() + (int64_t)timeout_ms * 1000;
    int fd = connect_to(host, port, deadline, err);
    if (fd < 0)
        return -fd;
    int rc = FO_E_IO;
    struct fo_buf req, rep;
    fo_buf_init(&req, FO_BUF_UNLIMITED);
    fo_buf_init(&rep, REPLY_MAX);
    int bad = fo_buf_printf(&req,
                            "%s %s HTTP/1.1\r\nHost: %s:%d\r\n"
                            "Connection: close\r\n",
                            method, path, host, port);
    if (token)
        bad |= fo_buf_printf(&req, "Authorization: Bearer %s\r\n", token);
    /* every write says application/json, with a body or none: the
     * daemon refuses any other (a browser form's) */
    if (body || (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0))
        bad |= fo_buf_printf(&req,
                             "Content-Type: application/json\r\n"
                             "Content-Length: %zu\r\n",
                             body ? body_len : 0);
    bad |= fo_buf_puts(&req, "\r\n");
    if (body)
        bad |= fo_buf_append(&req, body, body_len);
    if (bad) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    size_t off = 0;
    while (off < req.len) {
        ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR) &&
            wait_fd(fd, POLLOUT, deadline) == 1)
            continue;
        rc = fo_err_set(err, FO_E_IO, "send: %s",
                        n < 0 ? strerror(errno) : "timed out");
        goto out;
    }
    for (;;) {
        char buf[65536];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (fo_buf_append(&rep, buf, (size_t)n)) {
                rc = fo_err_set(err, FO_E_TOO_LARGE, "reply too large");
                goto out;
            }
            continue;
        }
        if (n == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w == 1)
                continue;
            rc = fo_err_set(err, FO_E_TIMEOUT, "no complete reply in %d ms",
                            timeout_ms);
            goto out;
        }
        if (rep.len)
            break; /* a reset after a complete reply */
        rc = fo_err_set(err, FO_E_IO, "recv: %s", strerror(errno));
        goto out;
    }
    if (fo_buf_putc(&rep, '\0')) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    rep.len--;
    const char *p = rep.data;
    const char *hdr_end = p ? strstr(p, "\r\n\r\n") : NULL;
    if (!hdr_end || strncmp(p, "HTTP/1.", 7) != 0 || rep.len < 12) {
        rc = fo_err_set(err, FO_E_IO, "not an HTTP reply");
        goto out;
    }
    *status = (int)strtol(p + 9, NULL, 10);
    size_t start = (size_t)(hdr_end + 4 - p);
    size_t blen = rep.len - start;
    char *b = malloc(blen + 1);
    if (!b) {
        rc = fo_err_set(err, FO_E_NOMEM, NULL);
        goto out;
    }
    memcpy(b, p + start, blen);
    b[blen] = '\0';
    *out = b;
    if (out_len)
        *out_len = blen;
    rc = FO_OK;
out:
    close(fd);
    fo_buf_release(&req);
    fo_buf_release(&rep);
    return rc;
}
