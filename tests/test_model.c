/* test_model: the model executors against fake model servers written here
 * (plain sockets on 127.0.0.1 port 0, a thread, a script of answers per
 * test; TLS with a certificate made at test time), and the pure helpers:
 * lenient JSON, templates, done_when assertions. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "daemon/orch.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"
#include "tests/tu_exec.h"

#define KEY "sk-test-SECRET-0123456789"
#define KEY_ENV "FORUM_TEST_MODEL_KEY"

/* ---- the fake server ----------------------------------------------------- */

struct fake_resp {
    int status;         /* 0: read the request and never answer */
    const char *body;   /* the JSON body */
    size_t big;         /* > 0: a body of this many bytes instead */
    const char *raw;    /* a whole raw response instead */
    const char *header; /* one extra header line with its CRLF */
};

struct fake {
    int lfd, port;
    pthread_t th;
    const struct fake_resp *script;
    size_t n;
    atomic_int requests;
    atomic_int stop;
    pthread_mutex_t mu;
    char seen[65536]; /* every request, one after another */
    size_t seen_len;
    SSL_CTX *tls;
    int held[16];
    int n_held;
    int64_t at_us[16]; /* when each of the first requests was read */
};

static int read_request(SSL *ssl, int fd, char *buf, size_t cap)
{
    size_t len = 0;
    long want = -1;
    for (;;) {
        if (len == cap - 1)
            break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (!ssl || !SSL_pending(ssl))
            if (poll(&pf, 1, 3000) <= 0)
                break;
        ssize_t n = ssl ? SSL_read(ssl, buf + len, (int)(cap - 1 - len))
                        : read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *hend = strstr(buf, "\r\n\r\n");
        if (hend && want < 0) {
            char *cl = strcasestr(buf, "content-length:");
            want =
                (long)(hend + 4 - buf) + (cl ? strtol(cl + 15, NULL, 10) : 0);
        }
        if (want >= 0 && (long)len >= want)
            break;
    }
    buf[len] = '\0';
    return (int)len;
}

static void send_all(SSL *ssl, int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = ssl ? SSL_write(ssl, s, (int)n) : write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void respond(SSL *ssl, int fd, const struct fake_resp *r)
{
    if (r->raw) {
        send_all(ssl, fd, r->raw, strlen(r->raw));
        return;
    }
    char *big = NULL;
    const char *body = r->body ? r->body : "";
    size_t bl = strlen(body);
    if (r->big) {
        big = malloc(r->big);
        memset(big, 'x', r->big);
        body = big;
        bl = r->big;
    }
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                      r->status, bl, r->header ? r->header : "");
    send_all(ssl, fd, head, (size_t)hl);
    send_all(ssl, fd, body, bl);
    free(big);
}

static void *serve(void *arg)
{
    struct fake *f = arg;
    char buf[32768];
    while (!atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int c = accept(f->lfd, NULL, NULL);
        if (c < 0)
            continue;
        SSL *ssl = NULL;
        if (f->tls) {
            ssl = SSL_new(f->tls);
            SSL_set_fd(ssl, c);
            if (SSL_accept(ssl) != 1) { /* the client refused us */
                SSL_free(ssl);
                close(c);
                continue;
            }
        }
        int len = read_request(ssl, c, buf, sizeof(buf));
        int i = atomic_fetch_add(&f->requests, 1);
        pthread_mutex_lock(&f->mu);
        if (i < 16)
            f->at_us[i] = ledger_mono_us();
        size_t room = sizeof(f->seen) - 1 - f->seen_len;
        size_t take = (size_t)len < room ? (size_t)len : room;
        memcpy(f->seen + f->seen_len, buf, take);
        f->seen_len += take;
        f->seen[f->seen_len] = '\0';
        pthread_mutex_unlock(&f->mu);
        const struct fake_resp *r =
            &f->script[(size_t)i < f->n ? (size_t)i : f->n - 1];
        if (r->status == 0 && !r->raw) { /* hold it open, never answer */
            if (f->n_held < 16)
                f->held[f->n_held++] = c;
            if (ssl)
                SSL_free(ssl); /* no close_notify: the fd stays open */
            continue;
        }
        respond(ssl, c, r);
        if (ssl) {
            SSL_shutdown(ssl);
            SSL_free(ssl);
        }
        shutdown(c, SHUT_WR);
        usleep(1000);
        close(c);
    }
    return NULL;
}

static struct fake *fake_start(const struct fake_resp *script, size_t n,
                               SSL_CTX *tls)
{
    struct fake *f = calloc(1, sizeof(*f));
    cr_assert_not_null(f);
    f->script = script;
    f->n = n;
    f->tls = tls;
    pthread_mutex_init(&f->mu, NULL);
    f->lfd = tu_listen_loopback(&f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, serve, f), 0);
    return f;
}

/* Fakes stay readable after fake_stop (tests look at what they saw);
 * teardown frees them. */
static struct fake *fakes[8];
static int n_fakes;

static void fake_stop(struct fake *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    for (int i = 0; i < f->n_held; i++)
        close(f->held[i]);
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
    if (n_fakes < 8)
        fakes[n_fakes++] = f;
}

static void teardown(void)
{
    for (int i = 0; i < n_fakes; i++)
        free(fakes[i]);
    n_fakes = 0;
}

/* A port where nothing listens. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    return ntohs(sa.sin_port);
}

/* ---- TLS material made at test time -------------------------------------- */

/* ---- helpers ------------------------------------------------------------- */

static char url_buf[128];

static const char *url_of(const char *scheme, int port)
{
    snprintf(url_buf, sizeof(url_buf), "%s://127.0.0.1:%d", scheme, port);
    return url_buf;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    setenv(KEY_ENV, KEY, 1);
}

static const char *chat_ok =
    "{\"id\":\"x\",\"model\":\"served-7b\",\"choices\":[{\"index\":0,"
    "\"message\":{\"role\":\"assistant\",\"content\":\"hello there\"}}]}";

/* One provider at url; small delays for the tests. */
static struct orch_model *client(int api, const char *url, int attempts,
                                 int timeout_ms, const char *ca_file)
{
    struct orch_model_provider p = {.api = api,
                                    .url = url,
                                    .model = "asked-model",
                                    .api_key_env = KEY_ENV,
                                    .tier = ORCH_TIER_ANY};
    struct orch_model_config c = {.providers = &p,
                                  .n_providers = 1,
                                  .attempts = attempts,
                                  .backoff_ms = 10,
                                  .backoff_max_ms = 40,
                                  .timeout_ms = timeout_ms,
                                  .connect_timeout_ms = 2000,
                                  .ca_file = ca_file};
    struct orch_model *m = NULL;
    struct fo_err err;
    int rc = orch_model_create(&c, &m, &err);
    cr_assert_eq(rc, FO_OK, "%s", err.msg);
    return m;
}

static int ask(struct orch_model *m, int api, struct orch_model_reply *rep,
               struct fo_err *err)
{
    struct orch_model_msg msgs[] = {{.role = "system", .content = "be brief"},
                                    {.role = "user", .content = "say hello"}};
    fo_err_clear(err);
    int rc = orch_model_call(m, api, ORCH_TIER_CAPABLE, msgs, 2, rep, err);
    cr_assert_null(strstr(err->msg, KEY), "key leaked: %s", err->msg);
    cr_assert_null(strstr(err->msg, "SECRET"), "key leaked: %s", err->msg);
    if (rep->text)
        cr_assert_null(strstr(rep->text, KEY));
    return rc;
}

/* ---- the client --------------------------------------------------------- */

Test(model_chat, ok_records_served_model_and_sends_the_key, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 3, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "hello there");
    cr_assert_str_eq(rep.model, "served-7b");
    cr_assert_eq(rep.attempts, 1);
    cr_assert_eq(rep.http_status, 200);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert(strstr(f->seen, "POST /v1/chat/completions HTTP/1.1"), "%s",
              f->seen);
    cr_assert(strstr(f->seen, "Authorization: Bearer " KEY));
    cr_assert(strstr(f->seen, "\"model\":\"asked-model\""));
    cr_assert(strstr(f->seen, "{\"content\":\"be brief\",\"role\":\"system\"}"),
              "%s", f->seen);
}

Test(model_chat, model_id_falls_back_to_the_configured_one, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {
        {.status = 200,
         .body = "{\"choices\":[{\"message\":{\"content\":\"hi\"}}]}"}};
    struct fake *f = fake_start(s, 1, NULL);
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f->port);
    struct orch_model *m = client(ORCH_EXEC_CHAT, url, 1, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_DEFAULT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.model, "asked-model");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert(strstr(f->seen, "POST /v1/chat/completions "), "%s", f->seen);
}

Test(model_chat, chunked_answer_is_read, .init = setup, .fini = teardown)
{
    static const char raw[] =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        "f\r\n{\"choices\":[{\"m\r\n"
        "1b\r\nessage\":{\"content\":\"ok\"}}]}\r\n0\r\n\r\n";
    struct fake_resp s[] = {{.raw = raw}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 1, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "ok");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_anthropic, ok_joins_text_parts_and_sends_its_headers, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {
        {.status = 200,
         .body =
             "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\","
             "\"model\":\"claude-test-1\",\"content\":[{\"type\":\"text\","
             "\"text\":\"one \"},{\"type\":\"tool_use\",\"id\":\"t\","
             "\"name\":\"read_file\",\"input\":{\"path\":\"a\"}},"
             "{\"type\":\"text\",\"text\":\"two\"}],\"stop_reason\":"
             "\"end_turn\"}"}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_ANTHROPIC, url_of("http", f->port), 1, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_ANTHROPIC, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "one two");
    cr_assert_str_eq(rep.tool_calls,
                     "[{\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\","
                     "\"id\":\"t\",\"name\":\"read_file\"}]");
    cr_assert_str_eq(rep.model, "claude-test-1");
    cr_assert_eq(rep.api, ORCH_EXEC_ANTHROPIC);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert(strstr(f->seen, "POST /v1/messages HTTP/1.1"), "%s", f->seen);
    cr_assert(strstr(f->seen, "x-api-key: " KEY));
    cr_assert(strstr(f->seen, "anthropic-version: 2023-06-01"));
    cr_assert(strstr(f->seen, "\"max_tokens\":1024"));
    cr_assert(strstr(f->seen, "\"system\":\"be brief\""));
    cr_assert(strstr(f->seen, "\"messages\":[{\"content\":\"say hello\","
                              "\"role\":\"user\"}]"),
              "%s", f->seen);
}

Test(model_errors, silent_server_hits_the_deadline, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 0}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 3, 700, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    double t0 = now_s();
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_TIMEOUT, "%s",
                 err.msg);
    double dt = now_s() - t0;
    cr_assert(dt >= 0.6, "took %.2f s", dt);
    cr_assert(rep.retriable);
    cr_assert_null(rep.text);
    cr_assert_str_eq(rep.model, "asked-model");
    /* the deadline cut the one request short: no retry, no answer */
    cr_assert_eq(rep.attempts, 1);
    cr_assert_eq(rep.http_status, 0);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert_eq(atomic_load(&f->requests), 1);
    cr_assert_eq(f->n_held, 1);
}

Test(model_errors, connection_refused_is_retried_then_unavailable,
     .init = setup, .fini = teardown)
{
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", dead_port()), 3, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UNAVAILABLE, "%s",
                 err.msg);
    cr_assert_eq(rep.attempts, 3);
    cr_assert(rep.retriable);
    cr_assert(strstr(err.msg, "cannot connect"), "%s", err.msg);
    cr_assert(strstr(err.msg, "3 attempts failed"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
}

Test(model_errors, a_connect_that_hangs_is_cut_by_the_connect_timer,
     .init = setup, .fini = teardown)
{
    /* a listener whose accept queue is full drops new SYNs: the connect
     * hangs until our timer cuts it */
    int port;
    int lfd = tu_listen_loopback(&port);
    cr_assert_eq(listen(lfd, 0), 0);
    int filler = tu_connect_loopback(port, 0);
    struct orch_model_provider p = {.api = ORCH_EXEC_CHAT,
                                    .url = url_of("http", port),
                                    .model = "m",
                                    .tier = ORCH_TIER_ANY};
    struct orch_model_config c = {.providers = &p,
                                  .n_providers = 1,
                                  .attempts = 2,
                                  .backoff_ms = 10,
                                  .timeout_ms = 30000,
                                  .connect_timeout_ms = 100};
    struct orch_model *m = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_create(&c, &m, &err), FO_OK, "%s", err.msg);
    struct orch_model_reply rep;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UNAVAILABLE, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "timed out after 100 ms"), "%s", err.msg);
    cr_assert(strstr(err.msg, "2 attempts failed"), "%s", err.msg);
    cr_assert_eq(rep.attempts, 2);
    cr_assert(rep.retriable);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    close(filler);
    close(lfd);
}

Test(model_errors, status_429_then_200_succeeds_after_backoff, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {
        {.status = 429, .body = "{\"error\":{\"message\":\"slow down\"}}"},
        {.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 2, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 3, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(rep.attempts, 2);
    cr_assert_str_eq(rep.text, "hello there");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_errors, status_500_gives_up_after_bounded_attempts, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 500, .body = "{}"}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 4, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    double t0 = now_s();
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UNAVAILABLE, "%s",
                 err.msg);
    double dt = now_s() - t0;
    /* backoff 10 + 20 + 40 ms */
    cr_assert(dt >= 0.06, "took %.3f s", dt);
    cr_assert_eq(rep.attempts, 4);
    cr_assert(strstr(err.msg, "HTTP 500"), "%s", err.msg);
    cr_assert(strstr(err.msg, "4 attempts"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    usleep(50000);
    cr_assert_eq(atomic_load(&f->requests), 4);
    fake_stop(f);
    /* each retry waited its doubled delay after the answer before it; the
     * fake stamps a request when its thread gets to it, so a stamp can be
     * late by a scheduling slice: the gaps are checked to 80% of the
     * delay (what they show is that the delays double, 10, 20, 40 ms) */
    for (int i = 1; i < 4; i++) {
        int64_t gap_us = f->at_us[i] - f->at_us[i - 1];
        cr_assert_geq(gap_us, (10 << (i - 1)) * 800,
                      "retry %d came after %lld us", i, (long long)gap_us);
    }
}

Test(model_errors, status_401_fails_at_once_and_the_key_stays_secret,
     .init = setup, .fini = teardown)
{
    /* a server that echoes the key back in its error message */
    struct fake_resp s[] = {
        {.status = 401,
         .body = "{\"error\":{\"message\":\"Incorrect API key provided: " KEY
                 "\"}}"}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 5, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert_eq(rep.attempts, 1);
    cr_assert_not(rep.retriable);
    cr_assert(strstr(err.msg, "HTTP 401"), "%s", err.msg);
    cr_assert(strstr(err.msg, "[redacted]"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    usleep(50000);
    cr_assert_eq(atomic_load(&f->requests), 1);
    fake_stop(f);
}

/* True when s holds SCRUB_PREFIX_MIN (8) or more bytes of the start of KEY. */
static int has_key_prefix(const char *s)
{
    char pre[9];
    memcpy(pre, KEY, 8);
    pre[8] = '\0';
    return strstr(s, pre) != NULL;
}

Test(model_errors, a_key_cut_by_the_snippet_limit_leaves_no_part_behind,
     .init = setup, .fini = teardown)
{
    /* The message's key starts 10 bytes before the 160-byte snippet cut. */
    char body[512], pad[123];
    memset(pad, 'x', 122);
    pad[122] = '\0';
    snprintf(body, sizeof(body),
             "{\"error\":{\"message\":\"Incorrect API key provided: %s" KEY
             " and more\"}}",
             pad);
    struct fake_resp s[] = {{.status = 401, .body = body}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 5, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "HTTP 401"), "%s", err.msg);
    cr_assert(strstr(err.msg, "xxxx"), "%s", err.msg);
    cr_assert_not(has_key_prefix(err.msg), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_errors, status_400_fails_at_once, .init = setup, .fini = teardown)
{
    struct fake_resp s[] = {{.status = 400, .body = "{\"error\":\"bad\"}"}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_ANTHROPIC, url_of("http", f->port), 5, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_ANTHROPIC, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert_eq(rep.attempts, 1);
    cr_assert(strstr(err.msg, "HTTP 400: bad"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_errors, wrong_shape_is_a_clear_error, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .body = "{\"choices\":[]}"},
                            {.status = 200, .body = "<html>hi</html>"}};
    struct fake *f = fake_start(s, 2, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 3, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "no choices[0].message.content string"), "%s",
              err.msg);
    cr_assert_eq(rep.attempts, 1);
    orch_model_reply_release(&rep);
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "not JSON"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_errors, oversize_body_is_capped, .init = setup, .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .big = 200000}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model_provider p = {.api = ORCH_EXEC_CHAT,
                                    .url = url_of("http", f->port),
                                    .model = "m",
                                    .tier = ORCH_TIER_ANY};
    struct orch_model_config c = {.providers = &p,
                                  .n_providers = 1,
                                  .response_max = 4096,
                                  .attempts = 3,
                                  .backoff_ms = 10};
    struct orch_model *m = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_create(&c, &m, &err), FO_OK, "%s", err.msg);
    struct orch_model_reply rep;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "over the 4096-byte cap"), "%s", err.msg);
    cr_assert_eq(rep.attempts, 1);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
}

Test(model_errors, missing_key_variable_sends_nothing, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 1, 5000, NULL);
    unsetenv(KEY_ENV);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_INVALID, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, KEY_ENV " is not set"), "%s", err.msg);
    cr_assert_eq(rep.attempts, 0);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert_eq(atomic_load(&f->requests), 0);
}

/* ---- TLS ------------------------------------------------------------------
 */

Test(model_tls, self_signed_certificate_is_refused, .init = setup,
     .fini = teardown)
{
    SSL_CTX *tls = tu_tls_server("IP:127.0.0.1", NULL);
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, tls);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("https", f->port), 3, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "did not verify"), "%s", err.msg);
    cr_assert_eq(rep.attempts, 1);
    cr_assert_eq(atomic_load(&f->requests), 0);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    SSL_CTX_free(tls);
}

Test(model_tls, trusted_certificate_works, .init = setup, .fini = teardown)
{
    char *dir = tu_tmpdir();
    char pem[512];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    SSL_CTX *tls = tu_tls_server("IP:127.0.0.1", pem);
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, tls);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("https", f->port), 1, 5000, pem);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "hello there");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    SSL_CTX_free(tls);
    tu_rmrf(dir);
}

Test(model_tls, trusted_certificate_for_another_host_is_refused, .init = setup,
     .fini = teardown)
{
    char *dir = tu_tmpdir();
    char pem[512];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    SSL_CTX *tls = tu_tls_server("DNS:other.example", pem);
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, tls);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("https", f->port), 1, 5000, pem);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_E_UPSTREAM, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "did not verify"), "%s", err.msg);
    cr_assert(strstr(err.msg, "mismatch"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    SSL_CTX_free(tls);
    tu_rmrf(dir);
}

/* ---- calls in flight on one event_base ----------------------------------- */

/* A fake server for many calls at once: one thread polls every connection,
 * reads each request whole and answers it with chat_ok delay_ms after it
 * arrived, but not before gate requests have arrived (INT_MAX: never). It
 * counts what it sees; a client that closes a held connection is counted
 * in peer_closed. */
#define MUX_MAX 256

struct mux_conn {
    int fd; /* -1: a free slot */
    int waiting;
    int64_t due_ms;
    size_t len;
    char buf[4096];
};

struct mux {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    int gate, delay_ms;
    atomic_int accepted, requests, answered, peer_closed, max_open;
    struct mux_conn conns[MUX_MAX];
};

static int request_complete(const char *buf)
{
    const char *hend = strstr(buf, "\r\n\r\n");
    if (!hend)
        return 0;
    const char *cl = strcasestr(buf, "content-length:");
    long want = (long)(hend + 4 - buf) + (cl ? strtol(cl + 15, NULL, 10) : 0);
    return (long)strlen(buf) >= want;
}

static void mux_close(struct mux_conn *k, int *open)
{
    close(k->fd);
    k->fd = -1;
    (*open)--;
}

static void *mux_serve(void *arg)
{
    struct mux *x = arg;
    struct pollfd pf[MUX_MAX + 1];
    int idx[MUX_MAX + 1];
    int open = 0;
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      strlen(chat_ok));
    while (!atomic_load(&x->stop)) {
        nfds_t n = 0;
        pf[n++] = (struct pollfd){.fd = x->lfd, .events = POLLIN};
        for (int i = 0; i < MUX_MAX; i++) {
            if (x->conns[i].fd < 0)
                continue;
            pf[n] = (struct pollfd){.fd = x->conns[i].fd, .events = POLLIN};
            idx[n++] = i;
        }
        poll(pf, n, 5);
        int64_t now = tu_now_ms();
        if (pf[0].revents & POLLIN) {
            int fd;
            while ((fd = accept4(x->lfd, NULL, NULL,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                int i = 0;
                while (i < MUX_MAX && x->conns[i].fd >= 0)
                    i++;
                cr_assert_lt(i, MUX_MAX, "mux: too many connections");
                x->conns[i] = (struct mux_conn){.fd = fd};
                atomic_fetch_add(&x->accepted, 1);
                if (++open > atomic_load(&x->max_open))
                    atomic_store(&x->max_open, open);
            }
        }
        for (nfds_t j = 1; j < n; j++) {
            struct mux_conn *k = &x->conns[idx[j]];
            if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r =
                read(k->fd, k->buf + k->len, sizeof(k->buf) - 1 - k->len);
            if (r > 0) {
                k->len += (size_t)r;
                k->buf[k->len] = '\0';
                if (!k->waiting && request_complete(k->buf)) {
                    k->waiting = 1;
                    k->due_ms = now + x->delay_ms;
                    atomic_fetch_add(&x->requests, 1);
                }
            } else if (r == 0 || errno != EAGAIN) {
                if (k->waiting)
                    atomic_fetch_add(&x->peer_closed, 1);
                mux_close(k, &open);
            }
        }
        if (atomic_load(&x->requests) < x->gate)
            continue;
        for (int i = 0; i < MUX_MAX; i++) {
            struct mux_conn *k = &x->conns[i];
            if (k->fd < 0 || !k->waiting || now < k->due_ms)
                continue;
            (void)!write(k->fd, head, (size_t)hl);
            (void)!write(k->fd, chat_ok, strlen(chat_ok));
            shutdown(k->fd, SHUT_WR);
            atomic_fetch_add(&x->answered, 1);
            mux_close(k, &open);
        }
    }
    for (int i = 0; i < MUX_MAX; i++)
        if (x->conns[i].fd >= 0)
            close(x->conns[i].fd);
    return NULL;
}

static struct mux *mux_start(int gate, int delay_ms)
{
    struct mux *x = calloc(1, sizeof(*x));
    cr_assert_not_null(x);
    for (int i = 0; i < MUX_MAX; i++)
        x->conns[i].fd = -1;
    x->gate = gate;
    x->delay_ms = delay_ms;
    x->lfd = tu_listen_loopback(&x->port);
    /* room for every connection a test makes at once */
    cr_assert_eq(listen(x->lfd, MUX_MAX), 0);
    cr_assert_eq(fcntl(x->lfd, F_SETFL, O_NONBLOCK), 0);
    cr_assert_eq(pthread_create(&x->th, NULL, mux_serve, x), 0);
    return x;
}

static void mux_stop(struct mux *x)
{
    atomic_store(&x->stop, 1);
    pthread_join(x->th, NULL);
    close(x->lfd);
    free(x);
}

/* The Threads: line of /proc/self/status. */
static int thread_count(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    cr_assert_not_null(fp);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof(line), fp))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(fp);
    cr_assert_gt(n, 0);
    return n;
}

/* Events left on base once it has run what was queued: 0 when every call
 * has cleaned up after itself. */
static int events_left(struct event_base *base)
{
    for (int i = 0; i < 8; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED |
                                               EVENT_BASE_COUNT_ACTIVE);
}

#define N_CALLS 200

struct many;
struct slot {
    struct many *all;
    int calls, rc, attempts;
    char text[32];
};

struct many {
    struct slot slot[N_CALLS];
    int done;
    int threads_max;
    struct mux *x;
    struct event *tick;
    size_t heap_base, heap_per_call; /* bytes, glibc's count */
};

static void many_done(void *arg, int rc, struct orch_model_reply *rep,
                      const struct fo_err *err)
{
    struct slot *s = arg;
    (void)err;
    s->calls++;
    s->rc = rc;
    s->attempts = rep->attempts;
    snprintf(s->text, sizeof(s->text), "%s", rep->text ? rep->text : "");
    int t = thread_count();
    if (t > s->all->threads_max)
        s->all->threads_max = t;
    if (++s->all->done == N_CALLS)
        event_del(s->all->tick);
}

/* Every few ms while the calls are in flight: the thread count, and the heap
 * once every request has reached the server (all calls waiting at once). */
static void many_tick(evutil_socket_t fd, short what, void *arg)
{
    struct many *mc = arg;
    (void)fd;
    (void)what;
    int t = thread_count();
    if (t > mc->threads_max)
        mc->threads_max = t;
    if (!mc->heap_per_call && atomic_load(&mc->x->requests) == N_CALLS) {
        size_t used = mallinfo2().uordblks;
        mc->heap_per_call =
            used > mc->heap_base ? (used - mc->heap_base) / N_CALLS : 1;
    }
}

Test(model_async, two_hundred_calls_in_flight_on_one_thread, .init = setup,
     .fini = teardown)
{
    struct many *mc = calloc(1, sizeof(*mc));
    cr_assert_not_null(mc);
    /* no answer before all 200 requests are in, then each ~100 ms after it
     * came: the calls can only end if all were in flight at once */
    mc->x = mux_start(N_CALLS, 100);
    struct orch_model_provider p = {.api = ORCH_EXEC_CHAT,
                                    .url = url_of("http", mc->x->port),
                                    .model = "asked-model",
                                    .api_key_env = KEY_ENV,
                                    .tier = ORCH_TIER_ANY};
    struct orch_model_config c = {
        .providers = &p, .n_providers = 1, .attempts = 1, .timeout_ms = 60000};
    struct orch_model *m = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_create(&c, &m, &err), FO_OK, "%s", err.msg);
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    mc->tick = event_new(base, -1, EV_PERSIST, many_tick, mc);
    struct timeval tv = {0, 5000};
    cr_assert_eq(event_add(mc->tick, &tv), 0);
    struct orch_model_msg msgs[] = {{.role = "system", .content = "be brief"},
                                    {.role = "user", .content = "say hello"}};
    int threads0 = thread_count();
    mc->threads_max = threads0;
    mc->heap_base = mallinfo2().uordblks;
    for (int i = 0; i < N_CALLS; i++) {
        mc->slot[i].all = mc;
        struct orch_model_call *call = NULL;
        cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                           ORCH_TIER_CHEAP, msgs, 2, many_done,
                                           &mc->slot[i], &call, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_not_null(call);
    }
    cr_assert_eq(mc->done, 0); /* done never runs inside the start */
    cr_assert_geq(event_base_dispatch(base), 0);
    cr_assert_eq(mc->done, N_CALLS);
    for (int i = 0; i < N_CALLS; i++) {
        cr_assert_eq(mc->slot[i].calls, 1, "call %d: done ran %d times", i,
                     mc->slot[i].calls);
        cr_assert_eq(mc->slot[i].rc, FO_OK, "call %d", i);
        cr_assert_eq(mc->slot[i].attempts, 1);
        cr_assert_str_eq(mc->slot[i].text, "hello there");
    }
    /* no thread was made for the calls, and none is left */
    cr_assert_eq(mc->threads_max, threads0);
    cr_assert_eq(thread_count(), threads0);
    cr_log_info("heap per call in flight: %zu bytes", mc->heap_per_call);
    event_free(mc->tick);
    cr_assert_eq(events_left(base), 0);
    event_base_free(base);
    orch_model_free(m);
    cr_assert_eq(atomic_load(&mc->x->accepted), N_CALLS);
    cr_assert_eq(atomic_load(&mc->x->requests), N_CALLS);
    cr_assert_eq(atomic_load(&mc->x->answered), N_CALLS);
    cr_assert_eq(atomic_load(&mc->x->max_open), N_CALLS);
    mux_stop(mc->x);
    free(mc);
}

struct one {
    int calls, rc;
    struct orch_model_reply rep; /* text taken */
    struct fo_err err;
    struct orch_model_call *call;
    atomic_int *seen; /* cancel the call once *seen reaches 1 */
    struct event *tick;
};

static void one_done(void *arg, int rc, struct orch_model_reply *rep,
                     const struct fo_err *err)
{
    struct one *o = arg;
    o->calls++;
    o->rc = rc;
    o->rep = *rep;
    rep->text = NULL; /* ours now */
    o->err = *err;
    orch_model_call_cancel(o->call); /* inside its own done: nothing */
}

static void cancel_when_seen(evutil_socket_t fd, short what, void *arg)
{
    struct one *o = arg;
    (void)fd;
    (void)what;
    if (atomic_load(o->seen) < 1)
        return;
    orch_model_call_cancel(o->call);
    o->call = NULL;
    event_del(o->tick);
}

Test(model_async, cancel_closes_the_connection_and_never_calls_done,
     .init = setup, .fini = teardown)
{
    struct mux *x = mux_start(INT_MAX, 0); /* holds every request */
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", x->port), 3, 30000, NULL);
    struct event_base *base = event_base_new();
    struct orch_model_msg msg = {.role = "user", .content = "hi"};
    struct one o = {.seen = &x->requests};
    struct fo_err err;
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &msg, 1, one_done, &o,
                                       &o.call, &err),
                 FO_OK, "%s", err.msg);
    o.tick = event_new(base, -1, EV_PERSIST, cancel_when_seen, &o);
    struct timeval tv = {0, 2000};
    cr_assert_eq(event_add(o.tick, &tv), 0);
    /* returns once the cancel has left no event behind */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_null(o.call);
    cr_assert_eq(o.calls, 0);
    event_free(o.tick);
    cr_assert_eq(events_left(base), 0);
    /* the server saw the held request's connection close */
    int64_t t0 = tu_now_ms();
    while (atomic_load(&x->peer_closed) < 1) {
        cr_assert_lt(tu_now_ms() - t0, 10000, "the connection stayed open");
        usleep(2000);
    }
    cr_assert_eq(atomic_load(&x->requests), 1);
    cr_assert_eq(atomic_load(&x->answered), 0);
    /* cancelled before the loop ran: nothing is sent at all */
    o.call = NULL;
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &msg, 1, one_done, &o,
                                       &o.call, &err),
                 FO_OK, "%s", err.msg);
    orch_model_call_cancel(o.call);
    orch_model_call_cancel(NULL);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(events_left(base), 0);
    cr_assert_eq(o.calls, 0);
    event_base_free(base);
    orch_model_free(m);
    mux_stop(x);
}

Test(model_async, start_errors_and_late_failures, .init = setup,
     .fini = teardown)
{
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, "http://127.0.0.1:9", 1, 5000, NULL);
    struct event_base *base = event_base_new();
    struct one o = {0};
    struct fo_err err;
    struct orch_model_msg ok = {.role = "user", .content = "hi"},
                          bad = {.role = "robot", .content = "hi"};
    /* refused at the start: nothing runs, done is never called */
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, NULL, 0, one_done, &o,
                                       &o.call, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "no messages"), "%s", err.msg);
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &bad, 1, one_done, &o,
                                       &o.call, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "message 0"), "%s", err.msg);
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_ANTHROPIC,
                                       ORCH_TIER_ANY, &ok, 1, one_done, &o,
                                       &o.call, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "no anthropic provider"), "%s", err.msg);
    cr_assert_eq(orch_model_call_start(m, NULL, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &ok, 1, one_done, &o,
                                       &o.call, &err),
                 FO_E_INVALID);
    struct orch_model *named =
        client(ORCH_EXEC_CHAT, "http://model.test:9", 1, 5000, NULL);
    cr_assert_eq(orch_model_call_start(named, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &ok, 1, one_done, &o,
                                       &o.call, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "needs a resolver"), "%s", err.msg);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(o.calls, 0);
    /* a missing key is found from the loop and comes to done */
    unsetenv(KEY_ENV);
    cr_assert_eq(orch_model_call_start(m, base, NULL, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &ok, 1, one_done, &o,
                                       &o.call, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(o.calls, 0);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(o.calls, 1);
    cr_assert_eq(o.rc, FO_E_INVALID);
    cr_assert(strstr(o.err.msg, KEY_ENV " is not set"), "%s", o.err.msg);
    cr_assert_eq(o.rep.attempts, 0);
    cr_assert_str_eq(o.rep.provider, "asked-model");
    cr_assert_eq(events_left(base), 0);
    event_base_free(base);
    orch_model_free(named);
    orch_model_free(m);
}

Test(model_async, host_names_are_looked_up_with_evdns, .init = setup,
     .fini = teardown)
{
    char *dir = tu_tmpdir();
    char pem[512], hosts[512];
    snprintf(pem, sizeof(pem), "%s/ca.pem", dir);
    snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
    FILE *fp = fopen(hosts, "w");
    cr_assert_not_null(fp);
    fputs("127.0.0.1 model.test\n", fp);
    fclose(fp);
    /* the certificate names the host, so SNI and the name check matter */
    SSL_CTX *tls = tu_tls_server("DNS:model.test", pem);
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, tls);
    char url[128];
    snprintf(url, sizeof(url), "https://model.test:%d", f->port);
    struct orch_model *m = client(ORCH_EXEC_CHAT, url, 1, 5000, pem);
    struct event_base *base = event_base_new();
    struct evdns_base *dns = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_dns_create(base, &dns, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(evdns_base_load_hosts(dns, hosts), 0);
    struct orch_model_msg msg = {.role = "user", .content = "hi"};
    struct one o = {0};
    cr_assert_eq(orch_model_call_start(m, base, dns, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &msg, 1, one_done, &o,
                                       &o.call, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(o.calls, 1);
    cr_assert_eq(o.rc, FO_OK, "%s", o.err.msg);
    cr_assert_str_eq(o.rep.text, "hello there");
    orch_model_reply_release(&o.rep);
    fake_stop(f);
    cr_assert(strstr(f->seen, "Host: model.test:"), "%s", f->seen);
    evdns_base_free(dns, 0);
    event_base_free(base);
    orch_model_free(m);
    SSL_CTX_free(tls);
    tu_rmrf(dir);
}

Test(model_async, localhost_needs_no_resolver, .init = setup, .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .body = chat_ok}};
    struct fake *f = fake_start(s, 1, NULL);
    char url[128];
    snprintf(url, sizeof(url), "http://localhost:%d", f->port);
    struct orch_model *m = client(ORCH_EXEC_CHAT, url, 1, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_CHAT, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "hello there");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
    cr_assert(strstr(f->seen, "Host: localhost:"), "%s", f->seen);
}

/* A name server on 127.0.0.1 that reads queries and never answers. */
static int silent_dns(int *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static atomic_int queries;

static void count_queries(evutil_socket_t fd, short what, void *arg)
{
    char b[512];
    (void)what;
    (void)arg;
    while (recv(fd, b, sizeof(b), 0) > 0)
        atomic_fetch_add(&queries, 1);
}

Test(model_async, a_lookup_is_cut_by_the_deadline_or_a_cancel, .init = setup,
     .fini = teardown)
{
    int port;
    int ufd = silent_dns(&port);
    struct event_base *base = event_base_new();
    struct event *uev =
        event_new(base, ufd, EV_READ | EV_PERSIST, count_queries, NULL);
    cr_assert_eq(event_add(uev, NULL), 0);
    struct evdns_base *dns =
        evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    char ns[64];
    snprintf(ns, sizeof(ns), "127.0.0.1:%d", port);
    cr_assert_eq(evdns_base_nameserver_ip_add(dns, ns), 0);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, "http://model.test:9", 3, 300, NULL);
    struct orch_model_msg msg = {.role = "user", .content = "hi"};
    struct fo_err err;
    /* the deadline passes while the name server is silent */
    struct one o = {0};
    cr_assert_eq(orch_model_call_start(m, base, dns, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &msg, 1, one_done, &o,
                                       &o.call, &err),
                 FO_OK, "%s", err.msg);
    while (o.calls == 0)
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
    cr_assert_eq(o.rc, FO_E_TIMEOUT, "%s", o.err.msg);
    cr_assert(o.rep.retriable);
    cr_assert_eq(o.rep.attempts, 1);
    cr_assert_geq(atomic_load(&queries), 1);
    /* a cancel while the lookup is in flight */
    struct one c = {.seen = &queries};
    atomic_store(&queries, 0);
    cr_assert_eq(orch_model_call_start(m, base, dns, ORCH_EXEC_CHAT,
                                       ORCH_TIER_ANY, &msg, 1, one_done, &c,
                                       &c.call, &err),
                 FO_OK, "%s", err.msg);
    c.tick = event_new(base, -1, EV_PERSIST, cancel_when_seen, &c);
    struct timeval tv = {0, 2000};
    cr_assert_eq(event_add(c.tick, &tv), 0);
    while (c.call)
        cr_assert_eq(event_base_loop(base, EVLOOP_ONCE), 0);
    cr_assert_eq(c.calls, 0);
    event_free(c.tick);
    event_free(uev);
    /* evdns answers the cancelled lookup from the loop; then all is quiet */
    cr_assert_eq(events_left(base), 0);
    evdns_base_free(dns, 0);
    event_base_free(base);
    close(ufd);
    orch_model_free(m);
}

/* ---- tiers, fallover, the executor -------------------------------------- */

Test(model_select, tiers_pick_providers_and_fallover_moves_on, .init = setup,
     .fini = teardown)
{
    struct fake_resp s1[] = {
        {.status = 200,
         .body = "{\"model\":\"cheap-1\",\"choices\":[{\"message\":"
                 "{\"content\":\"from cheap\"}}]}"}};
    struct fake_resp s2[] = {
        {.status = 200,
         .body = "{\"model\":\"big-1\",\"choices\":[{\"message\":"
                 "{\"content\":\"from frontier\"}}]}"}};
    struct fake *a = fake_start(s1, 1, NULL);
    struct fake *b = fake_start(s2, 1, NULL);
    char ua[64], ub[64], dead[64];
    snprintf(ua, sizeof(ua), "http://127.0.0.1:%d", a->port);
    snprintf(ub, sizeof(ub), "http://127.0.0.1:%d", b->port);
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", dead_port());
    struct orch_model_provider p[] = {
        {.name = "down",
         .api = ORCH_EXEC_CHAT,
         .url = dead,
         .model = "x",
         .tier = ORCH_TIER_FRONTIER},
        {.name = "small",
         .api = ORCH_EXEC_CHAT,
         .url = ua,
         .model = "c",
         .tier = ORCH_TIER_CHEAP},
        {.name = "big",
         .api = ORCH_EXEC_CHAT,
         .url = ub,
         .model = "f",
         .tier = ORCH_TIER_FRONTIER},
    };
    struct orch_model_config c = {.providers = p,
                                  .n_providers = 3,
                                  .attempts = 2,
                                  .backoff_ms = 5,
                                  .fallover = 1};
    struct orch_model *m = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_create(&c, &m, &err), FO_OK, "%s", err.msg);
    struct orch_model_msg msg = {.role = "user", .content = "hi"};
    struct orch_model_reply rep;
    cr_assert_eq(orch_model_call(m, ORCH_EXEC_CHAT, ORCH_TIER_CHEAP, &msg, 1,
                                 &rep, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "from cheap");
    cr_assert_str_eq(rep.provider, "small");
    orch_model_reply_release(&rep);
    cr_assert_eq(orch_model_call(m, ORCH_EXEC_CHAT, ORCH_TIER_FRONTIER, &msg, 1,
                                 &rep, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "from frontier");
    cr_assert_str_eq(rep.provider, "big");
    cr_assert_str_eq(rep.model, "big-1");
    cr_assert_eq(rep.attempts, 3); /* two on "down", one on "big" */
    orch_model_reply_release(&rep);
    /* no anthropic provider, no capable tier without an "any" provider */
    cr_assert_eq(orch_model_call(m, ORCH_EXEC_ANTHROPIC, ORCH_TIER_CHEAP, &msg,
                                 1, &rep, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "no anthropic provider for tier cheap"), "%s",
              err.msg);
    orch_model_reply_release(&rep);
    cr_assert_eq(orch_model_call(m, ORCH_EXEC_CHAT, ORCH_TIER_CAPABLE, &msg, 1,
                                 &rep, &err),
                 FO_E_INVALID);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(a);
    fake_stop(b);
}

Test(model_select, config_parses_from_json, .init = setup, .fini = teardown)
{
    const char *txt =
        "{\"providers\":[{\"api\":\"chat\",\"url\":\"http://127.0.0.1:1\","
        "\"model\":\"m1\",\"tier\":\"cheap\",\"api_key_env\":\"K\"},"
        "{\"api\":\"anthropic\",\"model\":\"claude\"}],\"attempts\":2,"
        "\"fallover\":true}";
    cJSON *j = cJSON_Parse(txt);
    struct orch_model_config c;
    struct orch_model_provider *pv = NULL;
    struct fo_err err;
    cr_assert_eq(orch_model_config_parse(j, &c, &pv, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_eq(c.n_providers, 2);
    cr_assert_eq(pv[0].tier, ORCH_TIER_CHEAP);
    cr_assert_eq(pv[1].tier, ORCH_TIER_ANY);
    cr_assert_eq(pv[1].api, ORCH_EXEC_ANTHROPIC);
    cr_assert_eq(c.attempts, 2);
    cr_assert(c.fallover);
    struct orch_model *m = NULL;
    cr_assert_eq(orch_model_create(&c, &m, &err), FO_OK, "%s", err.msg);
    orch_model_free(m);
    free(pv);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"providers\":[{\"api\":\"chat\",\"model\":\"m\","
                    "\"tier\":\"huge\"}]}");
    cr_assert_eq(orch_model_config_parse(j, &c, &pv, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "providers[0].tier"), "%s", err.msg);
    cJSON_Delete(j);
    /* a chat provider needs a URL; bad schemes are refused */
    struct orch_model_provider p = {.api = ORCH_EXEC_CHAT, .model = "m"};
    struct orch_model_config c2 = {.providers = &p, .n_providers = 1};
    cr_assert_eq(orch_model_create(&c2, &m, &err), FO_E_INVALID);
    p.url = "ftp://x";
    cr_assert_eq(orch_model_create(&c2, &m, &err), FO_E_INVALID);
    cr_assert(strstr(err.msg, "url"), "%s", err.msg);
}

Test(model_exec, executor_interface_runs_a_chat_job, .init = setup,
     .fini = teardown)
{
    struct fake_resp s[] = {{.status = 200, .body = chat_ok},
                            {.status = 401, .body = "{}"}};
    struct fake *f = fake_start(s, 2, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_CHAT, url_of("http", f->port), 1, 5000, NULL);
    struct orch_exec_config cfg = {.kind = ORCH_EXEC_CHAT,
                                   .models = m,
                                   .tier = ORCH_TIER_CHEAP,
                                   .model = "asked-model"};
    struct orch_result res;
    struct fo_err err;
    cr_assert_eq(tu_exec_once(&cfg, "do it", &res, &err), FO_OK, "%s", err.msg);
    cr_assert(res.ok);
    cr_assert_str_eq(res.output, "hello there");
    cr_assert_str_eq(res.model, "served-7b");
    cr_assert_eq(res.exit_code, 0);
    orch_result_release(&res);
    cr_assert_eq(tu_exec_once(&cfg, "do it", &res, &err), FO_OK, "%s", err.msg);
    cr_assert_not(res.ok);
    cr_assert(strstr(res.error, "HTTP 401"), "%s", res.error);
    cr_assert_str_eq(res.model, "asked-model");
    orch_result_release(&res);
    cfg.models = NULL;
    cr_assert_eq(tu_exec_once(&cfg, "x", &res, &err), FO_E_INVALID);
    orch_model_free(m);
    fake_stop(f);
    cr_assert(strstr(f->seen, "\"content\":\"do it\""), "%s", f->seen);
}

/* ---- lenient JSON ---------------------------------------------------------
 */

static cJSON *extract_ok(const char *text)
{
    cJSON *j = NULL;
    struct fo_err err;
    int rc = orch_json_extract(text, strlen(text), &j, &err);
    cr_assert_eq(rc, FO_OK, "%s: %s", text, err.msg);
    cr_assert(cJSON_IsObject(j));
    return j;
}

static void extract_fails(const char *text, const char *why)
{
    cJSON *j = NULL;
    struct fo_err err;
    cr_assert_eq(orch_json_extract(text, strlen(text), &j, &err), FO_E_JSON,
                 "%s", text);
    cr_assert_null(j);
    cr_assert(strstr(err.msg, why), "%s: %s", text, err.msg);
}

static const char *str_of(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    cr_assert(cJSON_IsString(v), "no %s", k);
    return v->valuestring;
}

Test(model_json, finds_the_object_the_model_meant)
{
    cJSON *j = extract_ok("  {\"a\": \"x\"}\n");
    cr_assert_str_eq(str_of(j, "a"), "x");
    cJSON_Delete(j);
    j = extract_ok("Here is the plan:\n```json\n{\"tasks\": [], \"a\": \"f\"}"
                   "\n```\nHope it helps {not json}.");
    cr_assert_str_eq(str_of(j, "a"), "f");
    cJSON_Delete(j);
    j = extract_ok("```\n{\"a\": \"bare fence\"}\n```");
    cr_assert_str_eq(str_of(j, "a"), "bare fence");
    cJSON_Delete(j);
    j = extract_ok("Sure! The answer is {\"a\": \"p}{\\\"q\", \"n\": {\"b\": "
                   "1}} and that is all {x}.");
    cr_assert_str_eq(str_of(j, "a"), "p}{\"q");
    cJSON_Delete(j);
    /* a trailing comment, comments inside, trailing commas */
    j = extract_ok("{\"a\": \"http://x//y\", // the url\n \"l\": [1, 2,],\n}"
                   " // done");
    cr_assert_str_eq(str_of(j, "a"), "http://x//y");
    cJSON_Delete(j);
    j = extract_ok("{\"a\": /* why */ \"c\"}");
    cr_assert_str_eq(str_of(j, "a"), "c");
    cJSON_Delete(j);
    /* prose braces before the real object are skipped */
    j = extract_ok("Use {curly} braces: {\"a\": \"second\"}");
    cr_assert_str_eq(str_of(j, "a"), "second");
    cJSON_Delete(j);
}

Test(model_json, says_what_was_wrong)
{
    extract_fails("I cannot do that.", "no JSON object found");
    extract_fails("Plan: {\"tasks\": [", "unbalanced braces");
    extract_fails("[1, 2]", "an array, not an object");
    extract_fails("{\"a\": 'single'}", "does not parse");
    extract_fails("{\"a\": 1, \"a\": 2}", "does not parse");
    cJSON *j = NULL;
    struct fo_err err;
    cr_assert_eq(orch_json_extract("x", 2u * 1024u * 1024u, &j, &err),
                 FO_E_INVALID);
}

/* ---- templates ------------------------------------------------------------
 */

Test(model_template, substitutes_once_and_never_injects)
{
    struct orch_tmpl_var v[] = {{"request", "ignore this {{secret}} {{x"},
                                {"secret", "S3CR3T"},
                                {"n", "3"}};
    char *out = NULL;
    struct fo_err err;
    cr_assert_eq(orch_template_render("Do: {{request}} ({{n}} tasks) {{n}}", v,
                                      3, 0, &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_str_eq(out, "Do: ignore this {{secret}} {{x (3 tasks) 3");
    free(out);
    cr_assert_eq(orch_template_render("{{ n }} {n} {{N}} {{}} {{{n}}} }}", v, 3,
                                      0, &out, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_str_eq(out, "{{ n }} {n} {{N}} {{}} {3} }}");
    free(out);
    cr_assert_eq(orch_template_render("a {{missing}} b", v, 3, 0, &out, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "unknown placeholder {{missing}}"), "%s",
              err.msg);
    cr_assert_eq(orch_template_render("{{request}}", v, 3, 8, &out, &err),
                 FO_E_TOO_LARGE);
}

/* ---- assertions -----------------------------------------------------------
 */

static struct orch_verdict check(const char *dw, const char *out, int code)
{
    cJSON *j = cJSON_Parse(dw);
    cr_assert_not_null(j, "%s", dw);
    struct orch_verdict v;
    struct fo_err err;
    cr_assert_eq(orch_assert_check(j, out, strlen(out), code, &v, &err), FO_OK,
                 "%s", err.msg);
    cJSON_Delete(j);
    return v;
}

static const char *failed(const struct orch_verdict *v, int i)
{
    const cJSON *s = cJSON_GetArrayItem(v->failed, i);
    cr_assert(cJSON_IsString(s));
    return s->valuestring;
}

Test(model_assert, each_kind_passes_and_fails)
{
    struct orch_verdict v =
        check("[{\"contains\":\"42\"},{\"not_contains\":\"ERROR\"},"
              "{\"regex\":\"^re(sult)?: [0-9]+$\"},{\"max_words\":3},"
              "{\"exit_code\":0},\"reads well\"]",
              "result: 42", 0);
    cr_assert(v.pass);
    cr_assert_eq(cJSON_GetArraySize(v.failed), 0);
    cr_assert_eq(cJSON_GetArraySize(v.validator), 1);
    orch_verdict_release(&v);
    v = check("[{\"contains\":\"ok\"},{\"not_contains\":\"ERROR\"},"
              "{\"regex\":\"^[a-z]+$\"},{\"max_words\":2},{\"exit_code\":0},"
              "{\"json\":true}]",
              "ERROR three words", 2);
    cr_assert_not(v.pass);
    cr_assert_eq(cJSON_GetArraySize(v.failed), 6);
    cr_assert_str_eq(failed(&v, 0), "contains \"ok\": not found in the output");
    cr_assert_str_eq(failed(&v, 1),
                     "not_contains \"ERROR\": found in the output");
    cr_assert_str_eq(failed(&v, 2),
                     "regex \"^[a-z]+$\": no match in the output");
    cr_assert_str_eq(failed(&v, 3), "max_words 2: the output has 3 words");
    cr_assert_str_eq(failed(&v, 4), "exit_code 0: the exit code was 2");
    cr_assert(strstr(failed(&v, 5), "json true: no JSON object"), "%s",
              failed(&v, 5));
    orch_verdict_release(&v);
    v = check("{\"json\":true}", "here: ```json\n{\"a\":1}\n```", 0);
    cr_assert(v.pass);
    orch_verdict_release(&v);
    v = check("\"only prose\"", "x", 0);
    cr_assert(v.pass);
    cr_assert_eq(cJSON_GetArraySize(v.validator), 1);
    orch_verdict_release(&v);
}

Test(model_assert, malformed_items_are_errors)
{
    const char *bad[] = {"[{\"contains\":1}]",
                         "[{\"nope\":\"x\"}]",
                         "[{\"regex\":\"(\"}]",
                         "[{\"regex\":\"(a)\\\\1\"}]",
                         "[{\"max_words\":-1}]",
                         "[{\"contains\":\"a\",\"regex\":\"b\"}]",
                         "[3]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        struct orch_verdict v;
        struct fo_err err;
        cr_assert_eq(orch_assert_check(j, "a", 1, 0, &v, &err), FO_E_INVALID,
                     "%s", bad[i]);
        cr_assert(strstr(err.msg, "done_when[0]"), "%s", err.msg);
        cJSON_Delete(j);
    }
}

/* ---- lanes on model executors, witnessed ----------------------------------
 */

Test(model_dispatch, lanes_run_on_their_model_executor_by_tier, .init = setup,
     .fini = teardown)
{
    struct fake_resp s1[] = {{.status = 200, .body = chat_ok}};
    struct fake_resp s2[] = {
        {.status = 200,
         .body = "{\"model\":\"claude-test-1\",\"content\":[{\"type\":"
                 "\"text\",\"text\":\"deep thought\"}]}"}};
    struct fake *a = fake_start(s1, 1, NULL);
    struct fake *b = fake_start(s2, 1, NULL);
    char ua[64], ub[64];
    snprintf(ua, sizeof(ua), "http://127.0.0.1:%d", a->port);
    snprintf(ub, sizeof(ub), "http://127.0.0.1:%d", b->port);
    struct orch_model_provider p[] = {
        {.api = ORCH_EXEC_CHAT,
         .url = ua,
         .model = "asked-model",
         .api_key_env = KEY_ENV,
         .tier = ORCH_TIER_CHEAP},
        {.api = ORCH_EXEC_ANTHROPIC,
         .url = ub,
         .model = "claude-asked",
         .api_key_env = KEY_ENV,
         .tier = ORCH_TIER_ANY},
    };
    struct orch_model_config mc = {
        .providers = p, .n_providers = 2, .attempts = 1, .timeout_ms = 5000};
    const char *roster =
        "{\"lanes\":["
        "{\"name\":\"writer\",\"category\":\"c\",\"domain\":\"d\","
        "\"keywords\":[\"write\"],\"model_tier\":\"cheap\","
        "\"executor\":\"chat\"},"
        "{\"name\":\"thinker\",\"category\":\"c\",\"domain\":\"d\","
        "\"keywords\":[\"think\"],\"model_tier\":\"frontier\","
        "\"executor\":\"anthropic\"},"
        "{\"name\":\"echo\",\"category\":\"c\",\"domain\":\"d\","
        "\"keywords\":[\"echo\"],\"model_tier\":\"cheap\","
        "\"executor\":\"stub\"}]}";
    struct orch_config cfg = {.roster_json = roster,
                              .roster_json_len = strlen(roster),
                              .models = &mc};
    struct orch *o = NULL;
    struct fo_err err;
    cr_assert_eq(orch_create(&cfg, &o, &err), FO_OK, "%s", err.msg);
    char *dir = tu_tmpdir();
    struct ledger *led = NULL;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &led, &err), FO_OK);
    struct orch_witness w = {.ledger = led};
    cJSON *plan = cJSON_Parse(
        "{\"tasks\":[{\"id\":\"T1\",\"agent\":\"writer\",\"instruction\":"
        "\"write it\"},{\"id\":\"T2\",\"agent\":\"thinker\",\"instruction\":"
        "\"think\",\"depends_on\":[\"T1\"]},{\"id\":\"T3\",\"agent\":\"echo\","
        "\"instruction\":\"echo\"}]}");
    cJSON *out = NULL;
    cr_assert_eq(tu_run_plan(o, &w, plan, "a request", &out, &err), FO_OK, "%s",
                 err.msg);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(out, "results");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")));
    const char *want[][3] = {{"T1", "served-7b", "hello there"},
                             {"T3", "stub", NULL},
                             {"T2", "claude-test-1", "deep thought"}};
    for (int i = 0; i < 3; i++) {
        const cJSON *e = cJSON_GetArrayItem(res, i);
        cr_assert_str_eq(str_of(e, "id"), want[i][0]);
        cr_assert_str_eq(str_of(e, "model"), want[i][1]);
        if (want[i][2])
            cr_assert_str_eq(str_of(e, "output"), want[i][2]);
    }
    /* the task entry names the executor */
    const cJSON *t1 = cJSON_GetArrayItem(res, 0);
    long long tseq;
    cr_assert_eq(fo_json_get_int(t1, "task_seq", 0, 1000, &tseq), FO_OK);
    char *body = NULL;
    size_t blen = 0;
    cr_assert_eq(ledger_body(led, tseq, &body, &blen, &err), FO_OK, "%s",
                 err.msg);
    cr_assert(strstr(body, "\"executor\":\"chat\""), "%s", body);
    cr_assert(strstr(body, "\"model\":\"asked-model\""), "%s", body);
    free(body);
    cJSON_Delete(out);
    cJSON_Delete(plan);
    ledger_close(led);
    orch_free(o);
    fake_stop(a);
    fake_stop(b);
    /* the upstream output reached the frontier lane; the key never hit disk */
    cr_assert(strstr(b->seen, "hello there"), "%s", b->seen);
    char path[600];
    const char *files[] = {"ledger.db", "ledger.db-wal"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        cr_assert_not(tu_file_has(path, "SECRET"), "key in %s", files[i]);
    }
    tu_rmrf(dir);
}
