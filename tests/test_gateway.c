/* The model gateway (surfaces/gateway.c) against the real daemon and a
 * fake upstream of its own here: plain and streamed OpenAI chat
 * completions, Anthropic messages, GET /v1/models, the bad inputs, what
 * the ledger witnesses, and that the guardrails touch only the witnessed
 * copy. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cJSON.h>

#include "tests/testutil.h"
#include "tests/tu_daemon.h"

/* ---- the fake upstream ---------------------------------------------------
 * One thread, one request per connection. A body with "stream":true gets
 * a chunked SSE answer: the first event, then (holding the rest until the
 * test says go, so the relay is proven to pass the first event on before
 * the upstream is done) the others. A prompt with DIE breaks the stream
 * after its first event. */

struct up {
    int lfd, port;
    pthread_t th;
    atomic_int go, stop;
    atomic_int cut;   /* a write failed: the daemon hung up on it */
    atomic_int sent;  /* SLOW chunks written */
    char seen[65536]; /* the last request's body */
    char path[256];   /* its path */
};

static int read_request(int fd, struct up *u)
{
    char buf[65536];
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = 0;
        end = strstr(buf, "\r\n\r\n");
    }
    size_t cl = 0;
    const char *h = strcasestr(buf, "\r\nContent-Length:");
    if (h)
        cl = (size_t)strtoul(h + 17, NULL, 10);
    size_t hl = (size_t)(end + 4 - buf);
    while (len < hl + cl && len < sizeof(buf) - 1) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
    }
    buf[len] = 0;
    sscanf(buf, "%*s %255s", u->path);
    snprintf(u->seen, sizeof(u->seen), "%s", buf + hl);
    return 0;
}

static struct up *the_up;

static void put(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (the_up)
                atomic_store(&the_up->cut, 1);
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static void chunk(int fd, const char *s)
{
    char hd[32];
    snprintf(hd, sizeof(hd), "%zx\r\n", strlen(s));
    put(fd, hd);
    put(fd, s);
    put(fd, "\r\n");
}

#define PLAIN_CHAT                                                             \
    "{\"id\":\"c1\",\"object\":\"chat.completion\",\"model\":\"fake-model\","  \
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","           \
    "\"content\":\"hello back\"},\"finish_reason\":\"stop\"}],\"usage\":{"     \
    "\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}"
#define PLAIN_ANTHROPIC                                                        \
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\","           \
    "\"model\":\"fake-claude\",\"content\":[{\"type\":\"text\",\"text\":"      \
    "\"hi from claude\"}],\"stop_reason\":\"end_turn\",\"usage\":{"            \
    "\"input_tokens\":5,\"output_tokens\":4}}"
#define EV1                                                                    \
    "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"choices\":[{" \
    "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}"    \
    "\n\n"
#define EV2                                                                    \
    "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"choices\":[{" \
    "\"index\":0,\"delta\":{\"content\":\"lo world\"},\"finish_reason\":"      \
    "\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n"
#define EV3 "data: [DONE]\n\n"

static void answer_stream(struct up *u, int fd)
{
    put(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    chunk(fd, EV1);
    if (strstr(u->seen, "DIE"))
        return; /* closed mid-stream */
    for (int i = 0; i < 2000 && !atomic_load(&u->go); i++)
        usleep(5000);
    for (int i = 0; strstr(u->seen, "SLOW") && i < 1000; i++) {
        chunk(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"."
                  "\"}}]}\n\n");
        if (atomic_load(&u->cut))
            return;
        atomic_fetch_add(&u->sent, 1);
        usleep(10000);
    }
    chunk(fd, EV2);
    chunk(fd, EV3);
    put(fd, "0\r\n\r\n");
}

static void answer_status(int fd, const char *status, const char *body)
{
    char hd[256];
    snprintf(hd, sizeof(hd),
             "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
             status, strlen(body));
    put(fd, hd);
    put(fd, body);
}

static void answer_plain(int fd, const char *body)
{
    answer_status(fd, "200 OK", body);
}

/* A chat answer that calls a tool (TOOL in the request), plain or
 * streamed: some text, then get_weather({"city":"Oslo"}) in pieces. */
#define PLAIN_TOOL                                                             \
    "{\"id\":\"c3\",\"object\":\"chat.completion\",\"choices\":[{\"index\":"   \
    "0,\"message\":{\"role\":\"assistant\",\"content\":\"Let me check\","      \
    "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{"  \
    "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}" \
    "]"                                                                        \
    "},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":11,"    \
    "\"completion_tokens\":5}}"

static void answer_tool_stream(int fd)
{
    put(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    chunk(fd, "data: {\"id\":\"c4\",\"choices\":[{\"index\":0,\"delta\":{"
              "\"role\":\"assistant\",\"content\":\"Let me check\"}}]}\n\n");
    chunk(fd, "data: {\"id\":\"c4\",\"choices\":[{\"index\":0,\"delta\":{"
              "\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
              "\"function\",\"function\":{\"name\":\"get_weather\","
              "\"arguments\":\"\"}}]}}]}\n\n");
    chunk(fd, "data: {\"id\":\"c4\",\"choices\":[{\"index\":0,\"delta\":{"
              "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"{\\\"city\\\":\"}}]}}]}\n\n");
    chunk(fd, "data: {\"id\":\"c4\",\"choices\":[{\"index\":0,\"delta\":{"
              "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"\\\"Oslo\\\"}\"}}]}}]}\n\n");
    chunk(fd, "data: {\"id\":\"c4\",\"choices\":[{\"index\":0,\"delta\":{},"
              "\"finish_reason\":\"tool_calls\"}],\"usage\":{"
              "\"prompt_tokens\":12,\"completion_tokens\":6}}\n\n");
    chunk(fd, EV3);
    put(fd, "0\r\n\r\n");
}

/* The Responses API, plain or streamed. */
#define PLAIN_RESPONSES                                                        \
    "{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\","     \
    "\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{"  \
    "\"type\":\"output_text\",\"text\":\"resp hi\"}]}],\"usage\":{"            \
    "\"input_tokens\":4,\"output_tokens\":2}}"
#define RESP_EV1                                                               \
    "event: response.output_text.delta\ndata: {\"type\":"                      \
    "\"response.output_text.delta\",\"delta\":\"resp \"}\n\n"
#define RESP_EV2                                                               \
    "event: response.output_text.delta\ndata: {\"type\":"                      \
    "\"response.output_text.delta\",\"delta\":\"stream\"}\n\n"
#define RESP_EV3                                                               \
    "event: response.completed\ndata: {\"type\":\"response.completed\","       \
    "\"response\":{\"id\":\"resp_2\",\"usage\":{\"input_tokens\":6,"           \
    "\"output_tokens\":3}}}\n\n"

static void answer_responses(struct up *u, int fd)
{
    if (!strstr(u->seen, "\"stream\":true")) {
        answer_plain(fd, PLAIN_RESPONSES);
        return;
    }
    put(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    chunk(fd, RESP_EV1);
    chunk(fd, RESP_EV2);
    chunk(fd, RESP_EV3);
    put(fd, "0\r\n\r\n");
}

/* A chat answer that stops on the length (LENGTH) or on the stop string
 * END, naming it as vLLM does (STOPSEQ). */
#define PLAIN_LENGTH                                                           \
    "{\"id\":\"c5\",\"choices\":[{\"message\":{\"content\":\"cut\"},"          \
    "\"finish_reason\":\"length\"}]}"
#define PLAIN_STOPSEQ                                                          \
    "{\"id\":\"c6\",\"choices\":[{\"message\":{\"content\":\"until \"},"       \
    "\"finish_reason\":\"stop\",\"stop_reason\":\"END\"}]}"

static void *up_main(void *arg)
{
    struct up *u = arg;
    while (!atomic_load(&u->stop)) {
        int fd = accept(u->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (atomic_load(&u->stop) || read_request(fd, u) != 0) {
            close(fd);
            continue;
        }
        if (!strncmp(u->path, "/busy/", 6))
            answer_status(fd, "503 Service Unavailable",
                          "{\"error\":{\"message\":\"overloaded\"}}");
        else if (strstr(u->path, "/responses"))
            answer_responses(u, fd);
        else if (strstr(u->seen, "TOOL"))
            if (strstr(u->seen, "\"stream\":true"))
                answer_tool_stream(fd);
            else
                answer_plain(fd, PLAIN_TOOL);
        else if (strstr(u->seen, "LENGTH"))
            answer_plain(fd, PLAIN_LENGTH);
        else if (strstr(u->seen, "STOPSEQ"))
            answer_plain(fd, PLAIN_STOPSEQ);
        else if (strstr(u->seen, "LIMIT"))
            put(fd,
                "HTTP/1.1 429 Too Many Requests\r\nContent-Type: "
                "application/json\r\nRetry-After: 7\r\nContent-Length: "
                "23\r\nConnection: close\r\n\r\n{\"error\":\"slow down!!\"}");
        else if (strstr(u->seen, "CUT")) /* dies mid body */
            put(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: 100\r\n\r\n{\"id\":\"cut");
        else if (strstr(u->seen, "\"stream\":true"))
            answer_stream(u, fd);
        else
            answer_plain(fd, strstr(u->path, "/messages") ? PLAIN_ANTHROPIC
                                                          : PLAIN_CHAT);
        close(fd);
    }
    return NULL;
}

static void up_start(struct up *u)
{
    memset(u, 0, sizeof(*u));
    the_up = u;
    u->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(u->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(u->lfd, 16), 0);
    socklen_t sl = sizeof(a);
    getsockname(u->lfd, (struct sockaddr *)&a, &sl);
    u->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&u->th, NULL, up_main, u), 0);
}

static void up_stop(struct up *u)
{
    atomic_store(&u->stop, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* wakes accept */
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)u->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    connect(fd, (struct sockaddr *)&a, sizeof(a));
    close(fd);
    pthread_join(u->th, NULL);
    close(u->lfd);
}

/* ---- the daemon ------------------------------------------------------- */

static void start(struct tu_daemon *d, char *dir, const struct up *u)
{
    char p[1024], cfg[2048];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\":{\"providers\":["
                     "{\"name\":\"local\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"fake-model\","
                     "\"tier\":\"cheap\"},"
                     "{\"name\":\"claude\",\"api\":\"anthropic\",\"url\":"
                     "\"http://127.0.0.1:%d\",\"model\":\"fake-claude\"},"
                     "{\"name\":\"dead\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:1\",\"model\":\"dead-model\"},"
                     /* fb-model: a 503, a refused connect, then one
                        that answers */
                     "{\"name\":\"busy\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/busy/v1\",\"model\":"
                     "\"fb-model\",\"tier\":\"frontier\"},"
                     "{\"name\":\"down\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:1/v1\",\"model\":\"fb-model\","
                     "\"tier\":\"frontier\"},"
                     "{\"name\":\"good\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"fb-model\","
                     "\"tier\":\"frontier\"}]}}",
                     u->port, u->port, u->port, u->port);
    cr_assert_eq(tu_write_file(p, cfg, (size_t)n), 0);
    tu_daemon_start(d, dir, NULL);
}

/* The payload of the last gateway_call entry (the caller frees it). */
static cJSON *last_call(const struct tu_daemon *d)
{
    cJSON *r = tu_http_json(d, "GET", "/ledger?limit=1000", NULL, 200);
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(r, "entries"), *e;
    long long seq = -1;
    cJSON_ArrayForEach (e, es) {
        if (!strcmp(tu_str(e, "kind"), "gateway_call"))
            seq = (long long)cJSON_GetObjectItemCaseSensitive(e, "seq")
                      ->valuedouble;
    }
    cJSON_Delete(r);
    cr_assert(seq >= 0, "no gateway_call entry");
    char path[64];
    snprintf(path, sizeof(path), "/ledger/%lld/payload", seq);
    cJSON *g = tu_http_json(d, "GET", path, NULL, 200);
    cJSON *b = cJSON_DetachItemFromObjectCaseSensitive(g, "body");
    cJSON_Delete(g);
    cr_assert(cJSON_IsObject(b));
    return b;
}

static long long num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return (long long)v->valuedouble;
}

/* Sends one POST with the token on a new connection; returns the fd. */
static int post(const struct tu_daemon *d, const char *path, const char *body,
                const char *extra)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)d->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char hd[1024];
    snprintf(hd, sizeof(hd),
             "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
             "%s\r\nContent-Type: application/json\r\n%sContent-Length: "
             "%zu\r\n\r\n",
             path, d->token, extra ? extra : "", strlen(body));
    put(fd, hd);
    put(fd, body);
    return fd;
}

/* Reads from fd until needle was read (or the end); returns all read. */
static char *read_until(int fd, const char *needle)
{
    size_t cap = 1 << 16, len = 0;
    char *b = calloc(1, cap);
    while (len < cap - 1 && !(needle && strstr(b, needle))) {
        ssize_t n = read(fd, b + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        b[len] = 0;
    }
    return b;
}

/* 1 when some file under dir holds s. */
static int dir_holds(const char *dir, const char *s)
{
    DIR *dp = opendir(dir);
    cr_assert(dp);
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        char p[2048];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (de->d_type == DT_DIR) {
            found = dir_holds(p, s);
            continue;
        }
        size_t len = 0;
        char *t = tu_read_file(p, &len);
        found = t && memmem(t, len, s, strlen(s)) != NULL;
        free(t);
    }
    closedir(dp);
    return found;
}

#define SECRET "sk-proj-Zx81KqLmNoPqRsTuVwXy1234567890ab"
#define EMAIL "jane.doe@example.org"

Test(gateway, plain_call_is_relayed_as_sent_and_witnessed_guarded,
     .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    const char *req =
        "{\"model\":\"fake-model\",\"messages\":[{\"role\":"
        "\"user\",\"content\":\"my key is " SECRET " and mail " EMAIL "\"}]}";
    int fd = post(&d, "/v1/chat/completions", req, "X-Forum-Session: s-1\r\n");
    char *r = read_until(fd, "\"total_tokens\":10}}");
    close(fd);
    cr_assert(strstr(r, "HTTP/1.1 200"), "%s", r);
    cr_assert(strstr(r, PLAIN_CHAT), "the answer as the provider gave it: %s",
              r);
    free(r);
    /* the upstream had the request byte for byte */
    cr_assert_str_eq(u.seen, req);
    cr_assert_str_eq(u.path, "/v1/chat/completions");
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "model"), "fake-model");
    cr_assert_str_eq(tu_str(e, "provider"), "local");
    cr_assert_str_eq(tu_str(e, "session"), "s-1");
    cr_assert_eq(num(e, "status"), 200);
    cr_assert_eq(num(e, "tokens_in"), 7);
    cr_assert_eq(num(e, "tokens_out"), 3);
    num(e, "latency_us");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(e, "error_class"));
    char *text = cJSON_PrintUnformatted(e);
    cr_assert(strstr(text, "[redacted:email]"), "%s", text);
    cr_assert(strstr(text, "hello back"), "%s", text);
    cr_assert_null(strstr(text, SECRET));
    cr_assert_null(strstr(text, EMAIL));
    free(text);
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_eq(tu_kind_count(dir, "gateway_call"), 1);
    cr_assert_not(dir_holds(dir, SECRET), "the key reached the data dir");
    cr_assert_not(dir_holds(dir, EMAIL), "the email reached the data dir");
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, stream_is_relayed_chunk_by_chunk_then_witnessed, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/chat/completions",
                  "{\"model\":\"cheap\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"hi\"}]}",
                  NULL);
    /* the first event arrives while the upstream still holds the rest */
    char *r1 = read_until(fd, "\"Hel\"");
    cr_assert(strstr(r1, "HTTP/1.1 200"), "%s", r1);
    cr_assert(strstr(r1, "Transfer-Encoding: chunked"), "%s", r1);
    cr_assert(strstr(r1, "text/event-stream"), "%s", r1);
    cr_assert(strstr(r1, "\"Hel\""), "%s", r1);
    cr_assert_null(strstr(r1, "lo world"));
    atomic_store(&u.go, 1);
    char *r2 = read_until(fd, "[DONE]");
    /* the last event comes only once the call is durable */
    cJSON *sum = tu_http_json(&d, "GET", "/summary", NULL, 200);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(sum, "by_kind"), "gateway_call");
    cr_assert(cJSON_IsNumber(k) && k->valuedouble == 1);
    cJSON_Delete(sum);
    char *r3 = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    cr_assert(strstr(r2, "lo world"), "%s", r2);
    cr_assert(strstr(r2, "[DONE]"), "%s", r2);
    free(r3);
    free(r1);
    free(r2);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "model"), "cheap");
    cr_assert_str_eq(tu_str(e, "response_text"), "Hello world");
    cr_assert_eq(num(e, "tokens_in"), 9);
    cr_assert_eq(num(e, "tokens_out"), 2);
    num(e, "ttft_us");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "stream")));
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, upstream_dying_mid_stream_ends_with_an_error_event, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/chat/completions",
                  "{\"model\":\"fake-model\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"DIE\"}]}",
                  NULL);
    char *r = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    cr_assert(strstr(r, "\"Hel\""), "%s", r);
    cr_assert(strstr(r, "event: error"), "%s", r);
    free(r);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "upstream_closed");
    cr_assert_str_eq(tu_str(e, "response_text"), "Hel");
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

/* The provider's deadline is 300 s: only the close can end the call
 * within the test's 60. */
Test(gateway, upstream_closing_mid_answer_fails_the_call_at_once, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/chat/completions",
                  "{\"model\":\"fake-model\",\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"CUT\"}]}",
                  NULL);
    char *r = read_until(fd, "}}");
    close(fd);
    cr_assert(strstr(r, "HTTP/1.1 502"), "%s", r);
    cr_assert(strstr(r, "closed the connection before its answer"), "%s", r);
    free(r);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "upstream_closed");
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, anthropic_messages_models_and_bad_input, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    /* x-api-key is the daemon's token too */
    char *body = NULL;
    const char *msg = "{\"model\":\"fake-claude\",\"max_tokens\":16,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char hdr[256];
    snprintf(hdr, sizeof(hdr), "x-api-key: %s\r\n", d.token);
    int fd = post(&d, "/v1/messages", msg, hdr);
    char *r = read_until(fd, "\"output_tokens\":4}}");
    close(fd);
    cr_assert(strstr(r, PLAIN_ANTHROPIC), "%s", r);
    free(r);
    cr_assert_str_eq(u.path, "/v1/messages");
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "api"), "anthropic");
    cr_assert_eq(num(e, "tokens_in"), 5);
    cJSON_Delete(e);
    /* models: each provider's, then the tiers */
    cJSON *m = tu_http_json(&d, "GET", "/v1/models", NULL, 200);
    char *mt = cJSON_PrintUnformatted(m);
    cr_assert(strstr(mt, "\"id\":\"fake-model\""), "%s", mt);
    cr_assert(strstr(mt, "\"id\":\"fake-claude\""), "%s", mt);
    cr_assert(strstr(mt, "\"id\":\"cheap\""), "%s", mt);
    free(mt);
    cJSON_Delete(m);
    /* no token, a wrong one */
    cr_assert_eq(tu_http(&d, "GET", "/v1/models", NULL, 0, &body), 401);
    free(body);
    /* unknown model, malformed JSON, wrong verb: nothing witnessed */
    long long before = 0;
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"nope\",\"messages\":[]}", 1, &body),
                 404);
    cr_assert(strstr(body, "no provider serves"), "%s", body);
    free(body);
    cr_assert_eq(
        tu_http(&d, "POST", "/v1/chat/completions", "{\"model\":", 1, &body),
        400);
    free(body);
    cr_assert_eq(tu_http(&d, "GET", "/v1/chat/completions", NULL, 1, &body),
                 405);
    free(body);
    /* an anthropic model asked through the chat API is unknown there */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"fake-claude\"}", 1, &body),
                 404);
    free(body);
    (void)before;
    /* a provider that cannot be reached: 502, witnessed as such */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"dead-model\",\"messages\":[]}", 1,
                         &body),
                 502);
    cr_assert(strstr(body, "\"type\":\"api_error\""), "%s", body);
    free(body);
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "unavailable");
    cr_assert_eq(num(e, "status"), 0);
    cJSON_Delete(e);
    /* the provider's own refusal comes back as it gave it */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"fake-model\",\"messages\":[{\"role\":"
                         "\"user\",\"content\":\"LIMIT\"}]}",
                         1, &body),
                 429);
    cr_assert_str_eq(body, "{\"error\":\"slow down!!\"}");
    free(body);
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "rate_limited");
    cr_assert_eq(num(e, "status"), 429);
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_eq(tu_kind_count(dir, "gateway_call"), 3);
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, client_hanging_up_mid_stream_cancels_the_upstream, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/chat/completions",
                  "{\"model\":\"fake-model\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"SLOW\"}]}",
                  NULL);
    char *r = read_until(fd, "\"Hel\"");
    cr_assert(strstr(r, "\"Hel\""), "%s", r);
    free(r);
    close(fd);
    atomic_store(&u.go, 1);
    /* the daemon lets go of the upstream: its writes fail, well before
     * the 1000 chunks it would send */
    while (!atomic_load(&u.cut))
        usleep(10000);
    cr_assert_lt(atomic_load(&u.sent), 1000);
    cJSON *e = NULL;
    for (;;) { /* the entry commits after the cancel */
        cJSON *g = tu_http_json(&d, "GET", "/summary", NULL, 200);
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(g, "by_kind"), "gateway_call");
        int there = cJSON_IsNumber(k);
        cJSON_Delete(g);
        if (there)
            break;
        usleep(10000);
    }
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "client_gone");
    const char *t = tu_str(e, "response_text");
    cr_assert(!strncmp(t, "Hel", 3), "%s", t);
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

/* ---- Anthropic Messages translated for a chat provider ----------------- */

/* POSTs body to path with the token and parses the JSON answer; *status
 * gets the HTTP status. */
static cJSON *call_json(const struct tu_daemon *d, const char *path,
                        const char *body, int *status)
{
    char *out = NULL;
    *status = tu_http(d, "POST", path, body, 1, &out);
    cJSON *j = cJSON_Parse(out ? out : "");
    cr_assert(j, "not JSON: %s", out);
    free(out);
    return j;
}

static const cJSON *at(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

#define TOOLS                                                                  \
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"the weather\","    \
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{"         \
    "\"type\":\"string\"}},\"required\":[\"city\"]}}]"

Test(gateway, anthropic_translated_plain_with_a_tool_use_round_trip,
     .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    /* fake-model has no Anthropic provider: its chat one is asked */
    int st = 0;
    cJSON *r = call_json(&d, "/v1/messages",
                         "{\"model\":\"fake-model\",\"max_tokens\":64,"
                         "\"system\":\"be brief\"," TOOLS
                         ",\"tool_choice\":{\"type\":\"auto\"},\"messages\":[{"
                         "\"role\":\"user\",\"content\":\"TOOL weather in "
                         "Oslo?\"}]}",
                         &st);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(u.path, "/v1/chat/completions");
    /* the provider had a chat request: system first, the tool as a
     * function, its own model */
    cr_assert(strstr(u.seen, "{\"content\":\"be brief\",\"role\":\"system\"}"),
              "%s", u.seen);
    cr_assert(strstr(u.seen, "\"tools\":[{\"function\":{\"description\":\"the "
                             "weather\",\"name\":\"get_weather\","
                             "\"parameters\":{"),
              "%s", u.seen);
    cr_assert(strstr(u.seen, "\"tool_choice\":\"auto\""), "%s", u.seen);
    cr_assert(strstr(u.seen, "\"model\":\"fake-model\""), "%s", u.seen);
    cr_assert_str_eq(tu_str(r, "type"), "message");
    cr_assert_str_eq(tu_str(r, "id"), "msg_c3");
    cr_assert_str_eq(tu_str(r, "model"), "fake-model");
    cr_assert_str_eq(tu_str(r, "stop_reason"), "tool_use");
    const cJSON *content = at(r, "content");
    cr_assert_eq(cJSON_GetArraySize(content), 2);
    const cJSON *b0 = cJSON_GetArrayItem(content, 0);
    const cJSON *b1 = cJSON_GetArrayItem(content, 1);
    cr_assert_str_eq(tu_str(b0, "type"), "text");
    cr_assert_str_eq(tu_str(b0, "text"), "Let me check");
    cr_assert_str_eq(tu_str(b1, "type"), "tool_use");
    cr_assert_str_eq(tu_str(b1, "id"), "call_1");
    cr_assert_str_eq(tu_str(b1, "name"), "get_weather");
    cr_assert_str_eq(tu_str(at(b1, "input"), "city"), "Oslo");
    cr_assert_eq(at(at(r, "usage"), "input_tokens")->valuedouble, 11);
    cr_assert_eq(at(at(r, "usage"), "output_tokens")->valuedouble, 5);
    cJSON_Delete(r);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "api"), "anthropic");
    cr_assert_str_eq(tu_str(e, "translated"), "chat");
    cr_assert_str_eq(tu_str(e, "provider"), "local");
    cr_assert_eq(num(e, "tokens_in"), 11);
    cr_assert_str_eq(tu_str(at(e, "response"), "stop_reason"), "tool_use");
    tu_str(e, "upstream_request_sha256");
    tu_str(e, "upstream_response_sha256");
    cJSON_Delete(e);
    /* the tool's result goes back: the call and its result in chat form */
    r = call_json(
        &d, "/v1/messages",
        "{\"model\":\"fake-model\",\"max_tokens\":64," TOOLS
        ",\"messages\":[{\"role\":\"user\",\"content\":\"weather in Oslo?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"Let me check\"},{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":"
        "\"get_weather\",\"input\":{\"city\":\"Oslo\"}}]},{\"role\":\"user\","
        "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"call_1\","
        "\"content\":\"-3C and snow\"}]}]}",
        &st);
    cr_assert_eq(st, 200);
    cr_assert(strstr(u.seen, "{\"content\":\"Let me check\",\"role\":"
                             "\"assistant\",\"tool_calls\":[{\"function\":{"
                             "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\","
                             "\"name\":\"get_weather\"},\"id\":\"call_1\","
                             "\"type\":\"function\"}]}"),
              "%s", u.seen);
    cr_assert(strstr(u.seen, "{\"content\":\"-3C and snow\",\"role\":\"tool\","
                             "\"tool_call_id\":\"call_1\"}"),
              "%s", u.seen);
    cr_assert_str_eq(tu_str(r, "stop_reason"), "end_turn");
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(at(r, "content"), 0), "text"),
                     "hello back");
    cJSON_Delete(r);
    /* stop reasons: the length, a stop sequence */
    r = call_json(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":1,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"LENGTH\"}]}",
                  &st);
    cr_assert_str_eq(tu_str(r, "stop_reason"), "max_tokens");
    cJSON_Delete(r);
    r = call_json(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":9,"
                  "\"stop_sequences\":[\"END\"],\"messages\":[{\"role\":"
                  "\"user\",\"content\":\"STOPSEQ\"}]}",
                  &st);
    cr_assert(strstr(u.seen, "\"stop\":[\"END\"]"), "%s", u.seen);
    cr_assert_str_eq(tu_str(r, "stop_reason"), "stop_sequence");
    cr_assert_str_eq(tu_str(r, "stop_sequence"), "END");
    cJSON_Delete(r);
    /* the provider's refusal in Anthropic's shape */
    r = call_json(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":9,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"LIMIT\"}]}",
                  &st);
    cr_assert_eq(st, 429);
    cr_assert_str_eq(tu_str(r, "type"), "error");
    cr_assert_str_eq(tu_str(at(r, "error"), "type"), "rate_limit_error");
    cJSON_Delete(r);
    /* not a Messages request: 400 before any provider is asked */
    r = call_json(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"messages\":[{\"role\":"
                  "\"system\",\"content\":\"x\"}]}",
                  &st);
    cr_assert_eq(st, 400);
    cr_assert_str_eq(tu_str(at(r, "error"), "type"), "invalid_request_error");
    cJSON_Delete(r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_eq(tu_kind_count(dir, "gateway_call"), 5);
    up_stop(&u);
    tu_rmrf(dir);
}

/* The position of needle in s (-1: none). */
static long pos(const char *s, const char *needle)
{
    const char *p = strstr(s, needle);
    return p ? p - s : -1;
}

Test(gateway, anthropic_translated_stream_is_relayed_event_by_event,
     .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":64,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  NULL);
    /* the first delta arrives while the provider still holds the rest */
    char *r1 = read_until(fd, "\"Hel\"");
    cr_assert(strstr(r1, "HTTP/1.1 200"), "%s", r1);
    cr_assert(strstr(r1, "text/event-stream"), "%s", r1);
    cr_assert(strstr(r1, "event: message_start\n"), "%s", r1);
    cr_assert(strstr(r1, "event: content_block_start\n"), "%s", r1);
    cr_assert(strstr(r1, "{\"delta\":{\"text\":\"Hel\",\"type\":"
                         "\"text_delta\"},\"index\":0,"),
              "%s", r1);
    cr_assert_null(strstr(r1, "lo world"));
    cr_assert(strstr(u.seen, "\"stream\":true,\"stream_options\":{"
                             "\"include_usage\":true}"),
              "%s", u.seen);
    atomic_store(&u.go, 1);
    char *r2 = read_until(fd, "event: message_stop");
    /* the last event comes only once the call is durable */
    cJSON *sum = tu_http_json(&d, "GET", "/summary", NULL, 200);
    const cJSON *k = at(at(sum, "by_kind"), "gateway_call");
    cr_assert(cJSON_IsNumber(k) && k->valuedouble == 1);
    cJSON_Delete(sum);
    char *r3 = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    cr_assert(strstr(r2, "event: message_stop"), "%s", r2);
    long a = pos(r2, "\"lo world\""), b = pos(r2, "event: content_block_stop"),
         c = pos(r2, "event: message_delta"), s = pos(r2, "message_stop");
    cr_assert(a >= 0 && a < b && b < c && c < s, "%s", r2);
    cr_assert(strstr(r2, "{\"delta\":{\"stop_reason\":\"end_turn\","
                         "\"stop_sequence\":null},\"type\":\"message_delta\","
                         "\"usage\":{\"input_tokens\":9,\"output_tokens\":2}}"),
              "%s", r2);
    free(r1);
    free(r2);
    free(r3);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "translated"), "chat");
    cr_assert_str_eq(tu_str(e, "response_text"), "Hello world");
    cr_assert_eq(num(e, "tokens_in"), 9);
    cr_assert_eq(num(e, "tokens_out"), 2);
    cr_assert(cJSON_IsTrue(at(e, "stream")));
    cJSON_Delete(e);
    /* a tool call streams as a tool_use block of input_json_delta */
    fd = post(
        &d, "/v1/messages",
        "{\"model\":\"fake-model\",\"max_tokens\":64,\"stream\":true," TOOLS
        ",\"messages\":[{\"role\":\"user\",\"content\":\"TOOL\"}]}",
        NULL);
    char *r = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    long t0 = pos(r, "\"text\":\"Let me check\""),
         t1 = pos(r, "{\"content_block\":{\"id\":\"call_1\",\"input\":{},"
                     "\"name\":\"get_weather\",\"type\":\"tool_use\"},"
                     "\"index\":1,"),
         t2 = pos(r, "\"partial_json\":\"{\\\"city\\\":\""),
         t3 = pos(r, "\"partial_json\":\"\\\"Oslo\\\"}\""),
         t4 = pos(r, "\"stop_reason\":\"tool_use\""),
         t5 = pos(r, "event: message_stop");
    cr_assert(t0 >= 0 && t0 < t1 && t1 < t2 && t2 < t3 && t3 < t4 && t4 < t5,
              "%s", r);
    cr_assert(strstr(r, "\"usage\":{\"input_tokens\":12,\"output_tokens\":6}"),
              "%s", r);
    free(r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, anthropic_translated_stream_dying_ends_with_an_error_event,
     .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":64,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"DIE\"}]}",
                  NULL);
    char *r = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    long a = pos(r, "\"Hel\""), b = pos(r, "event: error\ndata: {\"type\":"
                                           "\"error\",\"error\":{");
    cr_assert(a >= 0 && a < b, "%s", r);
    cr_assert_null(strstr(r, "message_stop"), "%s", r);
    free(r);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "upstream_closed");
    cr_assert_str_eq(tu_str(e, "translated"), "chat");
    cr_assert_str_eq(tu_str(e, "response_text"), "Hel");
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

Test(gateway, client_hanging_up_a_translated_stream_cancels_the_upstream,
     .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    int fd = post(&d, "/v1/messages",
                  "{\"model\":\"fake-model\",\"max_tokens\":64,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}",
                  NULL);
    char *r = read_until(fd, "\"Hel\"");
    cr_assert(strstr(r, "text_delta"), "%s", r);
    free(r);
    close(fd);
    atomic_store(&u.go, 1);
    while (!atomic_load(&u.cut))
        usleep(10000);
    cr_assert_lt(atomic_load(&u.sent), 1000);
    for (;;) { /* the entry commits after the cancel */
        cJSON *g = tu_http_json(&d, "GET", "/summary", NULL, 200);
        int there = cJSON_IsNumber(at(at(g, "by_kind"), "gateway_call"));
        cJSON_Delete(g);
        if (there)
            break;
        usleep(10000);
    }
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "error_class"), "client_gone");
    cr_assert_str_eq(tu_str(e, "translated"), "chat");
    cr_assert(!strncmp(tu_str(e, "response_text"), "Hel", 3));
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}

/* ---- fallover ------------------------------------------------------------ */

static void attempt_is(const cJSON *a, const char *provider, int status,
                       const char *cls)
{
    cr_assert_str_eq(tu_str(a, "provider"), provider);
    cr_assert_eq(num(a, "status"), status);
    if (cls)
        cr_assert_str_eq(tu_str(a, "error_class"), cls);
    else
        cr_assert_null(at(a, "error_class"));
    num(a, "latency_us");
}

Test(gateway, fallover_to_the_next_provider_of_the_model, .timeout = 60)
{
    struct up u;
    up_start(&u);
    atomic_store(&u.go, 1);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    char *body = NULL;
    /* busy answers 503, down refuses the connect, good answers */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"fb-model\",\"messages\":[{\"role\":"
                         "\"user\",\"content\":\"hi\"}]}",
                         1, &body),
                 200);
    cr_assert_str_eq(body, PLAIN_CHAT);
    free(body);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "provider"), "good");
    cr_assert_eq(num(e, "status"), 200);
    const cJSON *as = at(e, "attempts");
    cr_assert_eq(cJSON_GetArraySize(as), 3);
    attempt_is(cJSON_GetArrayItem(as, 0), "busy", 503, "upstream_5xx");
    attempt_is(cJSON_GetArrayItem(as, 1), "down", 0, "unavailable");
    attempt_is(cJSON_GetArrayItem(as, 2), "good", 200, NULL);
    cJSON_Delete(e);
    /* by the tier: the same */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"frontier\",\"messages\":[{\"role\":"
                         "\"user\",\"content\":\"hi\"}]}",
                         1, &body),
                 200);
    free(body);
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "provider"), "good");
    cr_assert_eq(cJSON_GetArraySize(at(e, "attempts")), 3);
    cJSON_Delete(e);
    /* a stream translated for Anthropic's client: the same */
    int fd = post(&d, "/v1/messages",
                  "{\"model\":\"fb-model\",\"max_tokens\":64,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  NULL);
    char *r = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    cr_assert(strstr(r, "HTTP/1.1 200"), "%s", r);
    cr_assert(strstr(r, "\"lo world\""), "%s", r);
    cr_assert(strstr(r, "event: message_stop"), "%s", r);
    free(r);
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "provider"), "good");
    cr_assert_eq(cJSON_GetArraySize(at(e, "attempts")), 3);
    cJSON_Delete(e);
    /* one provider: its failure is the client's, no attempts */
    cr_assert_eq(tu_http(&d, "POST", "/v1/chat/completions",
                         "{\"model\":\"dead-model\",\"messages\":[]}", 1,
                         &body),
                 502);
    free(body);
    e = last_call(&d);
    cr_assert_null(at(e, "attempts"));
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    cr_assert_eq(tu_kind_count(dir, "gateway_call"), 4);
    up_stop(&u);
    tu_rmrf(dir);
}

/* ---- the Responses API --------------------------------------------------- */

Test(gateway, responses_are_passed_through_plain_and_streamed, .timeout = 60)
{
    struct up u;
    up_start(&u);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, &u);
    const char *req = "{\"model\":\"fake-model\",\"input\":\"hi\"}";
    char *body = NULL;
    cr_assert_eq(tu_http(&d, "POST", "/v1/responses", req, 1, &body), 200);
    cr_assert_str_eq(body, PLAIN_RESPONSES);
    free(body);
    cr_assert_str_eq(u.path, "/v1/responses");
    cr_assert_str_eq(u.seen, req);
    cJSON *e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "api"), "responses");
    cr_assert_eq(num(e, "tokens_in"), 4);
    cr_assert_eq(num(e, "tokens_out"), 2);
    cJSON_Delete(e);
    int fd = post(&d, "/v1/responses",
                  "{\"model\":\"fake-model\",\"input\":\"hi\",\"stream\":true}",
                  NULL);
    char *r = read_until(fd, "\r\n0\r\n\r\n");
    close(fd);
    long a = pos(r, RESP_EV1), b = pos(r, RESP_EV2), c = pos(r, RESP_EV3);
    cr_assert(a >= 0 && a < b && b < c, "%s", r);
    free(r);
    e = last_call(&d);
    cr_assert_str_eq(tu_str(e, "api"), "responses");
    cr_assert_str_eq(tu_str(e, "response_text"), "resp stream");
    cr_assert_eq(num(e, "tokens_in"), 6);
    cr_assert_eq(num(e, "tokens_out"), 3);
    cJSON_Delete(e);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    up_stop(&u);
    tu_rmrf(dir);
}
