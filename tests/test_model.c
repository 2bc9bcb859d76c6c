/* test_model: the model executors against fake model servers written here
 * (plain sockets on 127.0.0.1 port 0, a thread, a script of answers per
 * test; TLS with a certificate made at test time), and the pure helpers:
 * lenient JSON, templates, done_when assertions. */
#include <arpa/inet.h>
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
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "daemon/orch.h"
#include "daemon/orch_model.h"
#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "tests/testutil.h"

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

/* A self-signed P-256 certificate for san ("IP:127.0.0.1" or
 * "DNS:other.example"); its PEM goes to pem_path when not NULL. */
static SSL_CTX *tls_server(const char *san, const char *pem_path)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    cr_assert_not_null(k);
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, k);
    X509_NAME *nm = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                               (const unsigned char *)"forum test", -1, -1, 0);
    X509_set_issuer_name(x, nm);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext =
        X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    cr_assert_not_null(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "CA:TRUE");
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    cr_assert(X509_sign(x, k, EVP_sha256()) > 0);
    if (pem_path) {
        FILE *fp = fopen(pem_path, "w");
        cr_assert_not_null(fp);
        PEM_write_X509(fp, x);
        fclose(fp);
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    cr_assert_eq(SSL_CTX_use_certificate(ctx, x), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey(ctx, k), 1);
    X509_free(x);
    EVP_PKEY_free(k);
    return ctx;
}

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
    struct orch_model_msg msgs[] = {{"system", "be brief"},
                                    {"user", "say hello"}};
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
             "\"text\":\"one \"},{\"type\":\"tool_use\",\"id\":\"t\"},"
             "{\"type\":\"text\",\"text\":\"two\"}],\"stop_reason\":"
             "\"end_turn\"}"}};
    struct fake *f = fake_start(s, 1, NULL);
    struct orch_model *m =
        client(ORCH_EXEC_ANTHROPIC, url_of("http", f->port), 1, 5000, NULL);
    struct orch_model_reply rep;
    struct fo_err err;
    cr_assert_eq(ask(m, ORCH_EXEC_ANTHROPIC, &rep, &err), FO_OK, "%s", err.msg);
    cr_assert_str_eq(rep.text, "one two");
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
    cr_assert(dt >= 0.6 && dt < 2.0, "took %.2f s", dt);
    cr_assert(rep.retriable);
    cr_assert_null(rep.text);
    cr_assert_str_eq(rep.model, "asked-model");
    orch_model_reply_release(&rep);
    orch_model_free(m);
    fake_stop(f);
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
    cr_assert(dt >= 0.06 && dt < 2.0, "took %.3f s", dt);
    cr_assert_eq(rep.attempts, 4);
    cr_assert(strstr(err.msg, "HTTP 500"), "%s", err.msg);
    cr_assert(strstr(err.msg, "4 attempts"), "%s", err.msg);
    orch_model_reply_release(&rep);
    orch_model_free(m);
    usleep(50000);
    cr_assert_eq(atomic_load(&f->requests), 4);
    fake_stop(f);
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
    SSL_CTX *tls = tls_server("IP:127.0.0.1", NULL);
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
    SSL_CTX *tls = tls_server("IP:127.0.0.1", pem);
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
    SSL_CTX *tls = tls_server("DNS:other.example", pem);
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
    struct orch_model_msg msg = {"user", "hi"};
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
    cr_assert_eq(orch_exec_once(&cfg, "do it", &res, &err), FO_OK, "%s",
                 err.msg);
    cr_assert(res.ok);
    cr_assert_str_eq(res.output, "hello there");
    cr_assert_str_eq(res.model, "served-7b");
    cr_assert_eq(res.exit_code, 0);
    orch_result_release(&res);
    cr_assert_eq(orch_exec_once(&cfg, "do it", &res, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_not(res.ok);
    cr_assert(strstr(res.error, "HTTP 401"), "%s", res.error);
    cr_assert_str_eq(res.model, "asked-model");
    orch_result_release(&res);
    cfg.models = NULL;
    cr_assert_eq(orch_exec_once(&cfg, "x", &res, &err), FO_E_INVALID);
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
    cr_assert_eq(orch_run_plan(o, &w, plan, "a request", &out, &err), FO_OK,
                 "%s", err.msg);
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
