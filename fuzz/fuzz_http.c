/* fuzz_http: the HTTP surface from raw request bytes. One in-process
 * server (surf_http over a real ledger and the orchestrator with its stub
 * model, the token "fuzz-token"); each input is sent on a fresh loopback
 * connection, the write side is shut, and the loop runs until the server
 * has answered and closed (or a bound of turns passes). Framing, routing,
 * auth, query and body parsing, every method of the handler table, the
 * event stream and the dashboard's routes see arbitrary bytes. Nothing may
 * crash, leak or hang. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "daemon/orch.h"
#include "ledger/ledger.h"
#include "surfaces/http.h"
#include "surfaces/surf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

#define TURNS 2000 /* loop turns an input may take (each at most 1 ms) */

static char dir[4096];
static struct event_base *base;
static struct surf_http *http;
static struct ledger *led;
static struct orch *orch;
static struct surf_ctx loop_ctx;
static int port;

static int ctx_open(void *hook, struct surf_ctx **out, struct fo_err *err)
{
    (void)hook;
    struct surf_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return fo_err_set(err, FO_E_NOMEM, NULL);
    int rc = ledger_open(dir, 0, NULL, &c->ledger, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->orch = orch;
    *out = c;
    return FO_OK;
}

static void ctx_close(void *hook, struct surf_ctx *c)
{
    (void)hook;
    ledger_close(c->ledger);
    free(c);
}

static void setup(void)
{
    /* as the daemon does (daemon/service.c): a client that hung up is
     * an error on the write, never a signal that ends the process */
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/forum-fuzz-http-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || evthread_use_pthreads() != 0)
        abort();
    if (ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &led, NULL) != FO_OK)
        abort();
    struct orch_config oc = {0};
    if (orch_create(&oc, &orch, NULL) != FO_OK)
        abort();
    loop_ctx = (struct surf_ctx){.ledger = led, .orch = orch};
    base = event_base_new();
    struct surf_http_config hc = {.port = 0,
                                  .token = "fuzz-token",
                                  .timeout_s = 1,
                                  .workers = 1,
                                  .loop_ctx = &loop_ctx,
                                  .ctx_open = ctx_open,
                                  .ctx_close = ctx_close};
    struct fo_err err;
    if (!base || surf_http_create(base, &hc, &http, &err) != FO_OK)
        abort();
    port = surf_http_port(http);
}

/* Runs what is ready, then waits up to 1 ms for the client's socket (or
 * for a worker to hand a reply back). */
static void turn(int fd)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 1);
    event_base_loop(base, EVLOOP_NONBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!base)
        setup();
    /* a non-blocking connect, the server's loop turning meanwhile (it is
     * this thread: a blocking connect on a full backlog would wait for
     * ever) */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        abort();
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (errno != EINPROGRESS) {
            fprintf(stderr, "fuzz_http: connect: %s\n", strerror(errno));
            abort();
        }
        int t = 0, e = 0;
        socklen_t el = sizeof(e);
        for (; t < 10 * TURNS; t++) {
            event_base_loop(base, EVLOOP_NONBLOCK);
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 1) == 1)
                break;
        }
        if (t == 10 * TURNS ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
            /* the server stopped accepting: that is a finding */
            fprintf(stderr, "fuzz_http: connect: %s\n",
                    e ? strerror(e) : "not accepted");
            abort();
        }
    }
    /* all of it, the server taking its turns as the socket fills */
    size_t off = 0;
    for (int t = 0; off < n && t < TURNS; t++) {
        ssize_t w = send(fd, data + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EAGAIN)
            break;
        turn(fd);
    }
    shutdown(fd, SHUT_WR);
    char buf[65536];
    for (int t = 0; t < TURNS; t++) {
        turn(fd);
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            break; /* answered and closed (or reset) */
    }
    close(fd);
    for (int t = 0; t < 3; t++)
        event_base_loop(base, EVLOOP_NONBLOCK); /* the server sees it */
    return 0;
}
