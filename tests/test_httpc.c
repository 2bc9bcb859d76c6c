/* test_httpc: the one HTTP client (daemon/httpc.h) on its own: the URL
 * parser, the SSE reader, a body streamed as it arrives, cancel from a
 * chunk, the connect and total deadlines, the response cap, TLS with a
 * test CA, an IPv6 literal without a resolver, the blocking fetch, an
 * upstream that closes early, the keep-alive pool and its retry rule. The
 * servers are scripted threads on 127.0.0.1 (or ::1). */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <openssl/ssl.h>

#include "daemon/httpc.h"
#include "tests/testutil.h"

/* ---- URLs ---------------------------------------------------------------- */

Test(httpc_url, splits_hosts_ports_paths_and_ipv6_literals)
{
    struct httpc_url u;
    struct fo_err err;
    cr_assert_eq(httpc_url_parse("http://[::1]:8080/a/b?x=1", &u, &err), FO_OK,
                 "%s", err.msg);
    cr_assert_eq(u.tls, 0);
    cr_assert_eq(u.port, 8080);
    cr_assert_str_eq(u.host, "::1");
    cr_assert_str_eq(u.addr, "::1"); /* a literal: no lookup */
    cr_assert_str_eq(u.path, "/a/b?x=1");
    cr_assert_str_eq(u.host_header, "[::1]:8080");
    httpc_url_release(&u);
    cr_assert_eq(httpc_url_parse("HTTPS://Example.org", &u, &err), FO_OK);
    cr_assert_eq(u.tls, 1);
    cr_assert_eq(u.port, 443);
    cr_assert_null(u.addr); /* a name: evdns looks it up */
    cr_assert_str_eq(u.path, "/");
    cr_assert_str_eq(u.host_header, "Example.org");
    httpc_url_release(&u);
    cr_assert_eq(httpc_url_parse("http://localhost:99/", &u, &err), FO_OK);
    cr_assert_str_eq(u.addr, "127.0.0.1");
    cr_assert_str_eq(u.host_header, "localhost:99");
    httpc_url_release(&u);
    httpc_url_release(&u); /* idempotent */
    const char *bad[][2] = {
        {"ftp://h/", "not an http"},      {"http://u:p@h/", "user info"},
        {"http://h/#frag", "fragment"},   {"http://h:0/", "port 0"},
        {"http://h:65536/", "not a URL"}, {"http://h:8x/", "not a URL"},
        {"http://h/a b", "not a URL"},    {"http:///path", "no host"},
        {"h/path", "not an http"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(httpc_url_parse(bad[i][0], &u, &err), FO_E_INVALID, "%s",
                     bad[i][0]);
        cr_assert(strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0], err.msg);
        cr_assert_eq(httpc_url_parse(bad[i][0], NULL, &err), FO_E_INVALID);
    }
    char longu[HTTPC_URL_MAX + 16];
    memset(longu, 'a', sizeof(longu) - 1);
    memcpy(longu, "http://h/", 9);
    longu[sizeof(longu) - 1] = '\0';
    cr_assert_eq(httpc_url_parse(longu, &u, &err), FO_E_INVALID);
}

/* ---- SSE ----------------------------------------------------------------- */

struct evs {
    char got[16][128];
    int n;
    int stop_at; /* return 1 at this event (0: never) */
};

static int collect(void *arg, const char *type, const char *data, size_t len)
{
    struct evs *e = arg;
    cr_assert_eq(strlen(data), len);
    snprintf(e->got[e->n], sizeof(e->got[0]), "%s|%s", type, data);
    e->n++;
    return e->stop_at && e->n == e->stop_at;
}

static int feed(struct httpc_sse *s, struct evbuffer *b, const char *text,
                struct evs *e)
{
    evbuffer_add(b, text, strlen(text));
    return httpc_sse_feed(s, b, collect, e);
}

Test(httpc_sse, reads_events_across_any_split_and_line_ending)
{
    const char *stream = ": a comment\r\nevent: message\r\ndata: {\"a\":\r\n"
                         "data: 1}\r\n\r\nid: 7\ndata:x\n\ndata: y\r\r"
                         "retry: 10\nevent: end\ndata\n\n\n";
    /* whole, then one byte at a time: the same events */
    for (int mode = 0; mode < 2; mode++) {
        struct httpc_sse s;
        struct evs e = {0};
        struct evbuffer *b = evbuffer_new();
        httpc_sse_init(&s, 1024);
        if (mode == 0) {
            cr_assert_eq(feed(&s, b, stream, &e), 0);
        } else {
            for (const char *c = stream; *c; c++) {
                char one[2] = {*c, 0};
                cr_assert_eq(feed(&s, b, one, &e), 0);
            }
        }
        cr_assert_eq(e.n, 4, "mode %d: %d events", mode, e.n);
        cr_assert_str_eq(e.got[0], "message|{\"a\":\n1}");
        cr_assert_str_eq(e.got[1], "message|x");
        cr_assert_str_eq(e.got[2], "message|y");
        cr_assert_str_eq(e.got[3], "end|"); /* "data" alone: empty data */
        cr_assert_str_eq(s.id, "7");
        httpc_sse_release(&s);
        evbuffer_free(b);
    }
}

Test(httpc_sse, stops_when_told_and_caps_an_event)
{
    struct httpc_sse s;
    struct evs e = {.stop_at = 1};
    struct evbuffer *b = evbuffer_new();
    httpc_sse_init(&s, 16);
    cr_assert_eq(feed(&s, b, "data: a\n\ndata: b\n\n", &e), 1);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(evbuffer_get_length(b), 9); /* the rest stays unread */
    e.stop_at = 0;
    cr_assert_eq(httpc_sse_feed(&s, b, collect, &e), 0);
    cr_assert_str_eq(e.got[1], "message|b");
    cr_assert_eq(feed(&s, b, "data: 0123456789abcdefXYZ\n\n", &e), -1);
    httpc_sse_release(&s);
    evbuffer_free(b);
}

/* ---- a scripted server --------------------------------------------------- */

/* One connection: reads the request head, then sends each step's bytes,
 * waiting for go before a step with wait set. */
struct step {
    const char *bytes;
    int wait; /* wait until srv.go reaches this before sending */
};

struct srv {
    int lfd, port, v6;
    SSL_CTX *tls;
    const struct step *steps;
    int hold;        /* accept and read, never answer */
    int close_after; /* close once the steps are sent (not waiting for the
                        client to close) */
    atomic_int go;   /* steps released by the test */
    atomic_int seen; /* requests read */
    atomic_int gone; /* the client closed the connection */
    char head[4096]; /* the request as read */
    pthread_t th;
};

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    int c = accept(s->lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    SSL *ssl = NULL;
    if (s->tls) {
        ssl = SSL_new(s->tls);
        SSL_set_fd(ssl, c);
        if (SSL_accept(ssl) != 1) {
            SSL_free(ssl);
            close(c);
            return NULL;
        }
    }
    size_t n = 0;
    while (n < sizeof(s->head) - 1 && !strstr(s->head, "\r\n\r\n")) {
        int r = ssl ? SSL_read(ssl, s->head + n, 1)
                    : (int)recv(c, s->head + n, 1, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    atomic_fetch_add(&s->seen, 1);
    for (const struct step *st = s->steps; !s->hold && st && st->bytes; st++) {
        while (atomic_load(&s->go) < st->wait)
            usleep(1000);
        size_t l = strlen(st->bytes);
        if (ssl)
            SSL_write(ssl, st->bytes, (int)l);
        else
            send(c, st->bytes, l, MSG_NOSIGNAL);
    }
    char b[256];
    while (!s->close_after && (ssl ? SSL_read(ssl, b, sizeof(b))
                                   : (int)recv(c, b, sizeof(b), 0)) > 0)
        ;
    atomic_store(&s->gone, 1);
    if (ssl)
        SSL_free(ssl);
    close(c);
    return NULL;
}

static struct srv *srv_start(const struct step *steps, SSL_CTX *tls, int v6)
{
    struct srv *s = calloc(1, sizeof(*s));
    s->steps = steps;
    s->tls = tls;
    s->v6 = v6;
    if (v6) {
        s->lfd = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                                 .sin6_addr = in6addr_loopback};
        socklen_t al = sizeof(a);
        if (bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(s->lfd);
            free(s);
            return NULL; /* no IPv6 loopback here */
        }
        cr_assert_eq(listen(s->lfd, 4), 0);
        getsockname(s->lfd, (struct sockaddr *)&a, &al);
        s->port = ntohs(a.sin6_port);
    } else {
        s->lfd = tu_listen_loopback(&s->port);
    }
    pthread_create(&s->th, NULL, srv_main, s);
    return s;
}

static void srv_stop(struct srv *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    close(s->lfd);
    pthread_join(s->th, NULL);
    free(s);
}

/* ---- requests ------------------------------------------------------------ */

struct got {
    int done, end, status;
    char body[8192];
    char chunks[8][256];
    int n_chunks;
    int status_at_chunk;
    struct srv *s;
    struct httpc_req *r;
    int cancel_at_chunk; /* cancel in the n-th on_chunk (0: never) */
    struct fo_err err;
};

static void got_chunk(void *arg, struct httpc_req *r, struct evbuffer *data)
{
    struct got *g = arg;
    g->status_at_chunk = httpc_req_status(r);
    size_t n = evbuffer_get_length(data);
    if (n >= sizeof(g->chunks[0]))
        n = sizeof(g->chunks[0]) - 1;
    evbuffer_remove(data, g->chunks[g->n_chunks], n);
    g->n_chunks++;
    if (g->cancel_at_chunk && g->n_chunks == g->cancel_at_chunk) {
        httpc_req_cancel(r);
        g->r = NULL;
        return;
    }
    /* the next part of the stream comes only after this one was seen */
    if (g->s)
        atomic_fetch_add(&g->s->go, 1);
}

static void got_done(void *arg, struct httpc_result *res)
{
    struct got *g = arg;
    g->done++;
    g->end = res->end;
    g->status = res->status;
    g->err = res->err;
    size_t n = evbuffer_get_length(res->body);
    if (n >= sizeof(g->body))
        n = sizeof(g->body) - 1;
    evbuffer_remove(res->body, g->body, n);
    g->r = NULL;
}

static struct httpc_url url_of(const char *scheme, const char *host, int port,
                               const char *path)
{
    char u[256];
    snprintf(u, sizeof(u), "%s://%s:%d%s", scheme, host, port, path);
    struct httpc_url out;
    struct fo_err err;
    cr_assert_eq(httpc_url_parse(u, &out, &err), FO_OK, "%s", err.msg);
    return out;
}

static void run(struct event_base *base, struct got *g)
{
    while (g->done == 0 && (g->r || g->cancel_at_chunk == 0))
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
}

Test(httpc_req, a_chunked_body_is_delivered_as_it_arrives)
{
    /* each chunk is sent only after the client saw the one before, so
     * done can only come if every chunk was delivered on its own */
    static const struct step steps[] = {
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
         "Content-Type: text/event-stream\r\n\r\n5\r\none\n\n\r\n",
         0},
        {"5\r\ntwo\n\n\r\n", 1},
        {"7\r\nthree\n\n\r\n0\r\n\r\n", 2},
        {NULL, 0}};
    struct srv *s = srv_start(steps, NULL, 0);
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", s->port, "/events");
    struct got g = {.s = s};
    struct httpc_header h[] = {{"Accept", "text/event-stream"}};
    struct httpc_spec spec = {.method = HTTPC_POST,
                              .url = &u,
                              .headers = h,
                              .n_headers = 1,
                              .body = "{}",
                              .body_len = 2,
                              .timeout_ms = 30000,
                              .on_chunk = got_chunk,
                              .done = got_done,
                              .arg = &g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(g.done, 0); /* never inside the start */
    run(base, &g);
    cr_assert_eq(g.done, 1);
    cr_assert_eq(g.end, HTTPC_END_OK, "%s", g.err.msg);
    cr_assert_eq(g.status, 200);
    cr_assert_eq(g.status_at_chunk, 200);
    cr_assert_eq(g.n_chunks, 3);
    cr_assert_str_eq(g.chunks[0], "one\n\n");
    cr_assert_str_eq(g.chunks[1], "two\n\n");
    cr_assert_str_eq(g.chunks[2], "three\n\n");
    cr_assert_str_eq(g.body, ""); /* all of it was streamed */
    cr_assert(strstr(s->head, "POST /events HTTP/1.1\r\n"), "%s", s->head);
    cr_assert(strstr(s->head, "Host: 127.0.0.1:"), "%s", s->head);
    cr_assert(strstr(s->head, "Content-Length: 2\r\n"), "%s", s->head);
    cr_assert(strstr(s->head, "Accept: text/event-stream\r\n"), "%s", s->head);
    cr_assert(strstr(s->head, "User-Agent: forum/"), "%s", s->head);
    srv_stop(s);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_req, cancel_from_a_chunk_closes_the_connection_and_calls_nothing)
{
    static const struct step steps[] = {
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "3\r\nabc\r\n",
         0},
        {NULL, 0}};
    struct srv *s = srv_start(steps, NULL, 0);
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", s->port, "/");
    struct got g = {.cancel_at_chunk = 1};
    struct httpc_spec spec = {.url = &u,
                              .timeout_ms = 30000,
                              .on_chunk = got_chunk,
                              .done = got_done,
                              .arg = &g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    while (g.r)
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
    cr_assert_eq(g.n_chunks, 1);
    cr_assert_str_eq(g.chunks[0], "abc");
    /* nothing is left on the base, and done never came */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(g.done, 0);
    int64_t t0 = tu_now_ms();
    while (!atomic_load(&s->gone))
        cr_assert_lt(tu_now_ms() - t0, 10000, "the connection stayed open");
    srv_stop(s);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_req, the_total_deadline_cuts_a_silent_server)
{
    struct srv *s = srv_start(NULL, NULL, 0);
    s->hold = 1;
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", s->port, "/");
    struct got g = {0};
    struct httpc_spec spec = {
        .url = &u, .timeout_ms = 200, .done = got_done, .arg = &g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    run(base, &g);
    cr_assert_eq(g.end, HTTPC_END_TIMEOUT);
    cr_assert_eq(g.err.code, FO_E_TIMEOUT);
    cr_assert(strstr(g.err.msg, "within 200 ms"), "%s", g.err.msg);
    cr_assert_eq(atomic_load(&s->seen), 1); /* it was connected and sent */
    srv_stop(s);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_req, the_connect_timer_cuts_a_connect_that_hangs)
{
    /* a listener whose accept queue is full drops new SYNs */
    int port;
    int lfd = tu_listen_loopback(&port);
    cr_assert_eq(listen(lfd, 0), 0);
    int filler = tu_connect_loopback(port, 0);
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", port, "/");
    struct got g = {0};
    struct httpc_spec spec = {.url = &u,
                              .connect_ms = 100,
                              .timeout_ms = 30000,
                              .done = got_done,
                              .arg = &g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    run(base, &g);
    cr_assert_eq(g.end, HTTPC_END_CONNECT_TIMEOUT);
    cr_assert(strstr(g.err.msg, "timed out after 100 ms"), "%s", g.err.msg);
    close(filler);
    close(lfd);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_req, a_body_over_the_cap_is_refused)
{
    static char big[8192];
    memset(big, 'x', sizeof(big) - 1);
    static const struct step steps[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 8191\r\n\r\n", 0},
        {big, 0},
        {NULL, 0}};
    struct srv *s = srv_start(steps, NULL, 0);
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", s->port, "/");
    struct got g = {0};
    struct httpc_spec spec = {.url = &u,
                              .timeout_ms = 30000,
                              .body_max = 1000,
                              .done = got_done,
                              .arg = &g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    run(base, &g);
    cr_assert_eq(g.end, HTTPC_END_TOO_LARGE);
    cr_assert_eq(g.err.code, FO_E_UPSTREAM);
    cr_assert(strstr(g.err.msg, "1000-byte cap"), "%s", g.err.msg);
    srv_stop(s);
    httpc_url_release(&u);
    event_base_free(base);
}

/* An upstream that closes before its answer is complete ends the request
 * at once as HTTPC_END_CLOSED (upstream_closed): the close is the event,
 * not the deadline. The deadline here is long, and each case is started
 * only after the server has closed, so a request still open when the
 * server is gone can only end by its deadline (judged by the end). */
static void closes_early(const char *answer, int want_end, const char *why)
{
    const struct step steps[] = {{answer, 0}, {NULL, 0}};
    struct srv *s = srv_start(answer ? steps : NULL, NULL, 0);
    s->close_after = 1;
    struct event_base *base = event_base_new();
    struct httpc_url u = url_of("http", "127.0.0.1", s->port, "/");
    for (int chunked = 0; chunked < 2; chunked++) {
        struct got g = {0};
        struct httpc_spec spec = {.method = HTTPC_POST,
                                  .url = &u,
                                  .body = "{}",
                                  .body_len = 2,
                                  .timeout_ms = 60000,
                                  .on_chunk = chunked ? got_chunk : NULL,
                                  .done = got_done,
                                  .arg = &g};
        struct fo_err err;
        cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
        run(base, &g);
        cr_assert_eq(g.done, 1);
        cr_assert_eq(g.end, want_end, "%s (%s): end %d: %s", why,
                     chunked ? "streamed" : "whole", g.end, g.err.msg);
        cr_assert_neq(g.err.code, FO_E_TIMEOUT, "%s", why);
        if (want_end == HTTPC_END_CLOSED)
            cr_assert(strstr(g.err.msg, "closed"), "%s", g.err.msg);
        pthread_join(s->th, NULL);
        /* the same server once more, for the streamed read */
        atomic_store(&s->seen, 0);
        pthread_create(&s->th, NULL, srv_main, s);
    }
    srv_stop(s);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_req, an_upstream_that_closes_mid_body_fails_at_once)
{
    closes_early("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial",
                 HTTPC_END_CLOSED, "a Content-Length body cut short");
    closes_early("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n20\r\nabc",
                 HTTPC_END_CLOSED, "a chunked body cut in a chunk");
    closes_early("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "5\r\nhello\r\n",
                 HTTPC_END_CLOSED, "a chunked body cut between chunks");
    closes_early("HTTP/1.1 200 OK\r\nContent-Le", HTTPC_END_CLOSED,
                 "headers cut short");
}

Test(httpc_req, an_upstream_that_closes_without_a_response_fails_at_once)
{
    closes_early(NULL, HTTPC_END_CLOSED, "closed before any response");
}

Test(httpc_req, a_garbage_status_line_is_malformed)
{
    closes_early("SSH-2.0-OpenSSH_9.2\r\n\r\n", HTTPC_END_MALFORMED,
                 "a status line that is not HTTP");
    closes_early("HTTP/1.1 abc Nope\r\n\r\n", HTTPC_END_MALFORMED,
                 "a status code that is not a number");
    /* bytes that never make a line: closed, not complete */
    closes_early("garbage", HTTPC_END_CLOSED, "half a status line");
}

Test(httpc_req, start_errors_and_a_refused_connect)
{
    struct event_base *base = event_base_new();
    struct httpc_url named, tls;
    struct fo_err err;
    cr_assert_eq(httpc_url_parse("http://forum.test/", &named, &err), FO_OK);
    cr_assert_eq(httpc_url_parse("https://127.0.0.1:9/", &tls, &err), FO_OK);
    struct got g = {0};
    struct httpc_spec spec = {
        .url = &named, .timeout_ms = 1000, .done = got_done, .arg = &g};
    cr_assert_eq(httpc_req_start(base, &spec, NULL, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "needs a resolver"), "%s", err.msg);
    spec.url = &tls;
    cr_assert_eq(httpc_req_start(base, &spec, NULL, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "TLS context"), "%s", err.msg);
    spec.timeout_ms = 0;
    cr_assert_eq(httpc_req_start(base, &spec, NULL, &err), FO_E_INVALID);
    /* a port nobody listens on */
    int port;
    int lfd = tu_listen_loopback(&port);
    close(lfd);
    struct httpc_url u = url_of("http", "127.0.0.1", port, "/");
    spec = (struct httpc_spec){
        .url = &u, .timeout_ms = 5000, .done = got_done, .arg = &g};
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    run(base, &g);
    cr_assert_eq(g.end, HTTPC_END_CONNECT);
    cr_assert_eq(g.err.code, FO_E_UNAVAILABLE);
    cr_assert(strstr(g.err.msg, "cannot connect to 127.0.0.1:"), "%s",
              g.err.msg);
    /* a header value of two lines: refused, and said from the loop */
    struct httpc_header bad[] = {{"X-A", "a\r\nb"}};
    g = (struct got){0};
    spec.headers = bad;
    spec.n_headers = 1;
    cr_assert_eq(httpc_req_start(base, &spec, &g.r, &err), FO_OK);
    cr_assert_eq(g.done, 0);
    run(base, &g);
    cr_assert_eq(g.end, HTTPC_END_SETUP);
    cr_assert(strstr(g.err.msg, "one line"), "%s", g.err.msg);
    cr_assert_eq(event_base_dispatch(base), 1);
    httpc_url_release(&u);
    httpc_url_release(&named);
    httpc_url_release(&tls);
    event_base_free(base);
}

/* ---- the connection pool ------------------------------------------------- */

/* A keep-alive server: a thread per connection, each answering requests
 * ("ok", with a Content-Length) until the client closes. */
struct ka {
    int lfd, port;
    SSL_CTX *tls;
    int close_each;  /* close the connection after each answer */
    int drop_second; /* read a connection's 2nd request, close unanswered */
    atomic_int accepts, requests, closed, client_closed;
    pthread_t th, conn_th[32];
    atomic_int n_conn;
    char last_head[2048];
};

struct ka_conn {
    struct ka *k;
    int fd;
};

static int ka_read(SSL *ssl, int fd, char *b, int n)
{
    return ssl ? SSL_read(ssl, b, n) : (int)recv(fd, b, (size_t)n, 0);
}

/* One request's head and body; 0 at the client's close. */
static int ka_request(struct ka *k, SSL *ssl, int fd)
{
    char head[2048];
    size_t n = 0;
    head[0] = '\0';
    while (n < sizeof(head) - 1 && !strstr(head, "\r\n\r\n")) {
        if (ka_read(ssl, fd, head + n, 1) <= 0)
            return 0;
        head[++n] = '\0';
    }
    const char *cl = strstr(head, "Content-Length: ");
    long len = cl ? strtol(cl + 16, NULL, 10) : 0;
    for (char c; len > 0 && ka_read(ssl, fd, &c, 1) == 1; len--)
        ;
    snprintf(k->last_head, sizeof(k->last_head), "%s", head);
    atomic_fetch_add(&k->requests, 1);
    return 1;
}

static void *ka_conn_main(void *arg)
{
    struct ka_conn *kc = arg;
    struct ka *k = kc->k;
    SSL *ssl = NULL;
    if (k->tls) {
        ssl = SSL_new(k->tls);
        SSL_set_fd(ssl, kc->fd);
        if (SSL_accept(ssl) != 1) {
            SSL_free(ssl);
            ssl = NULL;
            goto out;
        }
    }
    for (int i = 1;; i++) {
        if (!ka_request(k, ssl, kc->fd)) {
            atomic_fetch_add(&k->client_closed, 1);
            break;
        }
        if (k->drop_second && i == 2)
            break;
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                 "Content-Type: text/plain\r\n\r\nok";
        if (ssl)
            SSL_write(ssl, ok, (int)strlen(ok));
        else
            send(kc->fd, ok, strlen(ok), MSG_NOSIGNAL);
        if (k->close_each)
            break;
    }
out:
    if (ssl)
        SSL_free(ssl);
    close(kc->fd);
    atomic_fetch_add(&k->closed, 1);
    free(kc);
    return NULL;
}

static void *ka_main(void *arg)
{
    struct ka *k = arg;
    for (;;) {
        int c = accept(k->lfd, NULL, NULL);
        if (c < 0)
            return NULL;
        atomic_fetch_add(&k->accepts, 1);
        struct ka_conn *kc = malloc(sizeof(*kc));
        kc->k = k;
        kc->fd = c;
        int i = atomic_fetch_add(&k->n_conn, 1);
        cr_assert_lt(i, 32);
        pthread_create(&k->conn_th[i], NULL, ka_conn_main, kc);
    }
}

static struct ka *ka_start(SSL_CTX *tls)
{
    struct ka *k = calloc(1, sizeof(*k));
    k->tls = tls;
    k->lfd = tu_listen_loopback(&k->port);
    pthread_create(&k->th, NULL, ka_main, k);
    return k;
}

/* After the client closed every connection (its pool freed). */
static void ka_stop(struct ka *k)
{
    shutdown(k->lfd, SHUT_RDWR);
    close(k->lfd);
    pthread_join(k->th, NULL);
    for (int i = 0; i < atomic_load(&k->n_conn); i++)
        pthread_join(k->conn_th[i], NULL);
    free(k);
}

/* One request through pool, run to its end. */
static void pooled(struct event_base *base, struct httpc_pool *pool,
                   const struct httpc_url *u, const struct httpc_tls *tls,
                   int method, const struct httpc_header *h, size_t nh,
                   struct got *g)
{
    *g = (struct got){0};
    struct httpc_spec spec = {.method = method,
                              .url = u,
                              .headers = h,
                              .n_headers = nh,
                              .body = method == HTTPC_POST ? "{\"a\":1}" : NULL,
                              .body_len = method == HTTPC_POST ? 7 : 0,
                              .tls = tls,
                              .pool = pool,
                              .timeout_ms = 60000,
                              .done = got_done,
                              .arg = g};
    struct fo_err err;
    cr_assert_eq(httpc_req_start(base, &spec, &g->r, &err), FO_OK, "%s",
                 err.msg);
    run(base, g);
}

static void wait_for(atomic_int *v, int want)
{
    int64_t t0 = tu_now_ms();
    while (atomic_load(v) < want) {
        cr_assert_lt(tu_now_ms() - t0, 30000, "waited for %d", want);
        usleep(1000);
    }
}

static void sequential_on_one_connection(int tls_on)
{
    char *dir = tls_on ? tu_tmpdir() : NULL;
    char pem[512] = "";
    SSL_CTX *stls = NULL;
    struct httpc_tls *trust = NULL;
    struct fo_err err;
    if (tls_on) {
        snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
        stls = tu_tls_server("IP:127.0.0.1", pem);
        cr_assert_eq(httpc_tls_create(pem, &trust, &err), FO_OK);
    }
    struct ka *k = ka_start(stls);
    struct event_base *base = event_base_new();
    struct httpc_pool *pool = NULL;
    cr_assert_eq(httpc_pool_create(base, 0, 0, &pool, &err), FO_OK);
    struct httpc_url u =
        url_of(tls_on ? "https" : "http", "127.0.0.1", k->port, "/v1/x");
    enum { N = 20 };
    for (int i = 0; i < N; i++) {
        struct got g;
        pooled(base, pool, &u, trust, i % 2 ? HTTPC_GET : HTTPC_POST, NULL, 0,
               &g);
        cr_assert_eq(g.end, HTTPC_END_OK, "request %d: %s", i, g.err.msg);
        cr_assert_str_eq(g.body, "ok");
    }
    cr_assert_eq(atomic_load(&k->requests), N);
    cr_assert_eq(atomic_load(&k->accepts), 1, "%d connections for %d requests",
                 atomic_load(&k->accepts), N);
    cr_assert_null(strstr(k->last_head, "Connection: close"), "%s",
                   k->last_head);
    struct httpc_pool_stats st;
    httpc_pool_get_stats(pool, &st);
    cr_assert_eq(st.opened, 1);
    cr_assert_eq(st.reused, N - 1);
    cr_assert_eq(st.idle, 1);
    httpc_pool_free(pool); /* closes the idle connection */
    wait_for(&k->client_closed, 1);
    ka_stop(k);
    httpc_url_release(&u);
    event_base_free(base);
    httpc_tls_free(trust);
    if (stls)
        SSL_CTX_free(stls);
    if (dir)
        tu_rmrf(dir);
}

Test(httpc_pool, sequential_requests_share_one_connection)
{
    sequential_on_one_connection(0);
}

Test(httpc_pool, sequential_https_requests_share_one_connection)
{
    sequential_on_one_connection(1);
}

Test(httpc_pool, a_server_that_closes_idle_connections_fails_no_request)
{
    struct ka *k = ka_start(NULL);
    k->close_each = 1;
    struct event_base *base = event_base_new();
    struct httpc_pool *pool = NULL;
    struct fo_err err;
    cr_assert_eq(httpc_pool_create(base, 0, 0, &pool, &err), FO_OK);
    struct httpc_url u = url_of("http", "127.0.0.1", k->port, "/");
    for (int i = 0; i < 5; i++) {
        /* the server has closed the pooled connection, and the loop has
         * not run since: only the check before reuse can see it */
        wait_for(&k->closed, i);
        struct got g;
        pooled(base, pool, &u, NULL, HTTPC_POST, NULL, 0, &g);
        cr_assert_eq(g.end, HTTPC_END_OK, "request %d: %s", i, g.err.msg);
    }
    cr_assert_eq(atomic_load(&k->accepts), 5);
    struct httpc_pool_stats st;
    httpc_pool_get_stats(pool, &st);
    cr_assert_eq(st.reused, 0);
    cr_assert_eq(st.stale, 4);
    httpc_pool_free(pool);
    ka_stop(k);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_pool, a_request_the_peer_dropped_is_retried_only_when_safe)
{
    /* each connection: the first request answered, the second read and
     * the connection closed without an answer */
    struct ka *k = ka_start(NULL);
    k->drop_second = 1;
    struct event_base *base = event_base_new();
    struct httpc_pool *pool = NULL;
    struct fo_err err;
    cr_assert_eq(httpc_pool_create(base, 0, 0, &pool, &err), FO_OK);
    struct httpc_url u = url_of("http", "127.0.0.1", k->port, "/");
    struct got g;
    pooled(base, pool, &u, NULL, HTTPC_GET, NULL, 0, &g); /* conn 1 */
    cr_assert_eq(g.end, HTTPC_END_OK, "%s", g.err.msg);
    /* a GET dropped on a reused connection: sent again on a fresh one */
    pooled(base, pool, &u, NULL, HTTPC_GET, NULL, 0, &g); /* 1, then 2 */
    cr_assert_eq(g.end, HTTPC_END_OK, "%s", g.err.msg);
    cr_assert_eq(atomic_load(&k->accepts), 2);
    /* a POST sent whole and dropped: the server may have acted on it */
    pooled(base, pool, &u, NULL, HTTPC_POST, NULL, 0, &g); /* 2 */
    cr_assert_eq(g.end, HTTPC_END_CLOSED, "%s", g.err.msg);
    cr_assert_eq(g.err.code, FO_E_UNAVAILABLE);
    cr_assert_eq(atomic_load(&k->accepts), 2);
    /* a POST with an Idempotency-Key is sent again */
    pooled(base, pool, &u, NULL, HTTPC_POST, NULL, 0, &g); /* 3 */
    cr_assert_eq(g.end, HTTPC_END_OK, "%s", g.err.msg);
    struct httpc_header idem[] = {{"Idempotency-Key", "k-1"}};
    pooled(base, pool, &u, NULL, HTTPC_POST, idem, 1, &g); /* 3, then 4 */
    cr_assert_eq(g.end, HTTPC_END_OK, "%s", g.err.msg);
    cr_assert_eq(atomic_load(&k->accepts), 4);
    struct httpc_pool_stats st;
    httpc_pool_get_stats(pool, &st);
    cr_assert_eq(st.retried, 2);
    cr_assert_eq(st.opened, 4);
    httpc_pool_free(pool);
    ka_stop(k);
    httpc_url_release(&u);
    event_base_free(base);
}

Test(httpc_pool, idle_connections_are_bounded_and_closed_after_the_idle_time)
{
    struct ka *k = ka_start(NULL);
    struct event_base *base = event_base_new();
    struct httpc_pool *pool = NULL;
    struct fo_err err;
    cr_assert_eq(httpc_pool_create(base, 2, 100, &pool, &err), FO_OK);
    struct httpc_url u = url_of("http", "127.0.0.1", k->port, "/");
    /* three at once: three connections, two kept */
    struct got g[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        struct httpc_spec spec = {.url = &u,
                                  .pool = pool,
                                  .timeout_ms = 60000,
                                  .done = got_done,
                                  .arg = &g[i]};
        cr_assert_eq(httpc_req_start(base, &spec, &g[i].r, &err), FO_OK);
    }
    while (!g[0].done || !g[1].done || !g[2].done)
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(g[i].end, HTTPC_END_OK, "%s", g[i].err.msg);
    cr_assert_eq(atomic_load(&k->accepts), 3);
    struct httpc_pool_stats st;
    httpc_pool_get_stats(pool, &st);
    cr_assert_eq(st.idle, 2);
    wait_for(&k->client_closed, 1); /* the third, closed at once */
    /* the idle timer closes the other two */
    while (st.idle > 0) {
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
        httpc_pool_get_stats(pool, &st);
    }
    wait_for(&k->client_closed, 3);
    cr_assert_eq(event_base_dispatch(base), 1); /* nothing left on the base */
    httpc_pool_free(pool);
    ka_stop(k);
    httpc_url_release(&u);
    event_base_free(base);
}

/* ---- TLS, IPv6, the blocking fetch --------------------------------------- */

static const struct step hello[] = {
    {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kind: greeting\r\n\r\nhello",
     0},
    {NULL, 0}};

Test(httpc_fetch, https_verified_by_a_test_ca_and_refused_without_it)
{
    char *dir = tu_tmpdir();
    char pem[512];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    SSL_CTX *stls = tu_tls_server("IP:127.0.0.1", pem);
    struct httpc_tls *trust = NULL, *system = NULL;
    struct fo_err err;
    cr_assert_eq(httpc_tls_create(pem, &trust, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(httpc_tls_create(NULL, &system, &err), FO_OK, "%s", err.msg);
    struct httpc_tls *none = NULL;
    cr_assert_eq(httpc_tls_create("/nonexistent.pem", &none, &err), FO_E_IO);
    cr_assert(strstr(err.msg, "/nonexistent.pem"), "%s", err.msg);

    struct srv *s = srv_start(hello, stls, 0);
    struct httpc_url u = url_of("https", "127.0.0.1", s->port, "/x");
    struct httpc_spec spec = {.url = &u, .tls = trust, .timeout_ms = 10000};
    struct httpc_reply rep;
    cr_assert_eq(httpc_fetch(&spec, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(rep.status, 200);
    cr_assert_str_eq(rep.body, "hello");
    cr_assert_eq(rep.len, 5);
    httpc_reply_release(&rep);
    srv_stop(s);

    s = srv_start(hello, stls, 0);
    httpc_url_release(&u);
    u = url_of("https", "127.0.0.1", s->port, "/x");
    spec = (struct httpc_spec){.url = &u, .tls = system, .timeout_ms = 10000};
    cr_assert_eq(httpc_fetch(&spec, &rep, &err), FO_E_UPSTREAM);
    cr_assert(strstr(err.msg, "did not verify"), "%s", err.msg);
    srv_stop(s);

    httpc_url_release(&u);
    httpc_tls_free(trust);
    httpc_tls_free(system);
    httpc_tls_free(NULL);
    SSL_CTX_free(stls);
    tu_rmrf(dir);
}

Test(httpc_fetch, an_ipv6_literal_needs_no_resolver)
{
    struct srv *s = srv_start(hello, NULL, 1);
    if (!s) {
        cr_log_warn("no IPv6 loopback: skipped");
        return;
    }
    struct httpc_url u = url_of("http", "[::1]", s->port, "/six");
    struct httpc_spec spec = {.url = &u, .timeout_ms = 10000};
    struct httpc_reply rep;
    struct fo_err err;
    cr_assert_eq(httpc_fetch(&spec, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.body, "hello");
    cr_assert(strstr(s->head, "GET /six HTTP/1.1\r\n"), "%s", s->head);
    cr_assert(strstr(s->head, "Host: [::1]:"), "%s", s->head);
    httpc_reply_release(&rep);
    srv_stop(s);
    httpc_url_release(&u);
}
