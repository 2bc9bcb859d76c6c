/* The gateway's client keys (daemon/keys.c, cli/cli_key.c, the auth path
 * of surfaces/gateway.c) against the real daemon and the fake model of
 * tu_model.h: `forum key add|list|revoke` while the daemon runs, a key as
 * a bearer and as x-api-key, a revoked key (401), --max-calls (429 with
 * Retry-After, also after a restart), --rpm, --models (403), each refusal
 * in the API's own error shape, the key's name and session in the
 * witnessed entry, the key file (0600, no key in clear), /metrics. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "ledger/fo_buf.h"
#include "ledger/fo_sha.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"
#include "tests/tu_model.h"

static const char *answer_hi(struct fake *f, const char *role, int n,
                             const char *model, const char *prompt)
{
    (void)f, (void)role, (void)n, (void)model, (void)prompt;
    return "hi";
}

static void start(struct tu_daemon *d, const char *dir, const struct fake *f)
{
    char p[1024], cfg[1024];
    snprintf(p, sizeof(p), "%s/forum.json", dir);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\":{\"providers\":["
                     "{\"name\":\"local\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"fake-model\","
                     "\"tier\":\"cheap\"},"
                     "{\"name\":\"other\",\"api\":\"chat\",\"url\":"
                     "\"http://127.0.0.1:%d/v1\",\"model\":\"other-model\"},"
                     "{\"name\":\"claude\",\"api\":\"anthropic\",\"url\":"
                     "\"http://127.0.0.1:%d\",\"model\":\"fake-claude\"}]}}",
                     f->port, f->port, f->port);
    cr_assert_eq(tu_write_file(p, cfg, (size_t)n), 0);
    tu_daemon_start(d, dir, NULL);
}

/* `forum key add NAME [args...]`: the key it printed (static). */
static const char *key_add(const char *dir, const char *name, const char *a1,
                           const char *a2, const char *a3, const char *a4)
{
    static char key[8][128];
    static int at;
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "key", "add", name, a1,
                                a2, a3, a4, NULL);
    cr_assert_eq(r.status, 0, "key add %s: %d %s", name, r.status, r.err);
    char *k = key[at++ % 8];
    snprintf(k, 128, "%.*s", (int)strcspn(r.out, "\n"), r.out);
    cr_assert(!strncmp(k, "fk_", 3) && strlen(k) == 51, "key add: %s", r.out);
    tu_run_free(&r);
    return k;
}

/* One POST to path with the headers hdrs (each ending in \r\n; no token
 * unless given there) asking model with the prompt text (NULL: hello).
 * Returns the status; *reply the whole reply. */
static int call_text(const struct tu_daemon *d, const char *path,
                     const char *hdrs, const char *model, const char *text,
                     char **reply)
{
    char body[512], req[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":16,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"%s\"}]}",
             model, text ? text : "hello");
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                     "close\r\nContent-Type: application/json\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, hdrs, strlen(body), body);
    int closed = 0;
    char *r = NULL;
    int st = tu_http_raw(d->port, req, (size_t)n, 60000, &closed, &r);
    cr_assert(r, "no reply from %s", path);
    *reply = r;
    return st;
}

static int call(const struct tu_daemon *d, const char *path, const char *hdrs,
                const char *model, char **reply)
{
    return call_text(d, path, hdrs, model, NULL, reply);
}

static int chat(const struct tu_daemon *d, const char *key, const char *model,
                char **reply)
{
    char h[256];
    snprintf(h, sizeof(h), "Authorization: Bearer %s\r\n", key);
    return call(d, "/v1/chat/completions", h, model, reply);
}

static int chat_ok(const struct tu_daemon *d, const char *key)
{
    char *r = NULL;
    int st = chat(d, key, "fake-model", &r);
    free(r);
    return st;
}

/* The reply's body parsed. */
static cJSON *body_of(const char *reply)
{
    const char *b = strstr(reply, "\r\n\r\n");
    cr_assert(b, "no body: %s", reply);
    return tu_json_parse(b + 4);
}

/* The error's type, in the shape of api: OpenAI {"error": {"type",
 * "message", "code"}}; Anthropic {"type": "error", "error": {...}}. */
static void expect_error(const char *reply, int anthropic, const char *type)
{
    cJSON *j = body_of(reply);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    cr_assert(cJSON_IsObject(e), "no error object: %s", reply);
    cr_expect_str_eq(tu_str(e, "type"), type, "%s", reply);
    cr_expect(strlen(tu_str(e, "message")) > 0);
    if (anthropic)
        cr_expect_str_eq(tu_str(j, "type"), "error");
    else
        cr_expect_str_eq(tu_str(e, "code"), type);
    cJSON_Delete(j);
}

/* The Retry-After header's value, or -1. */
static long retry_after(const char *reply)
{
    const char *h = strstr(reply, "\r\nRetry-After: ");
    const char *end = strstr(reply, "\r\n\r\n");
    if (!h || (end && h > end))
        return -1;
    return strtol(h + 15, NULL, 10);
}

/* The bodies of the gateway_call entries, in order (an array). */
static cJSON *calls(const struct tu_daemon *d)
{
    cJSON *r = tu_http_json(d, "GET", "/ledger?limit=1000", NULL, 200);
    cJSON *out = cJSON_CreateArray();
    const cJSON *e;
    cJSON_ArrayForEach (e, cJSON_GetObjectItemCaseSensitive(r, "entries")) {
        if (strcmp(tu_str(e, "kind"), "gateway_call"))
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/ledger/%lld/payload", tu_num(e, "seq"));
        cJSON *g = tu_http_json(d, "GET", path, NULL, 200);
        cJSON_AddItemToArray(
            out, cJSON_DetachItemFromObjectCaseSensitive(g, "body"));
        cJSON_Delete(g);
    }
    cJSON_Delete(r);
    return out;
}

/* `forum key list --json`: the key named name (the caller frees the
 * list); out gets the whole stdout. */
static cJSON *listed(const char *dir, const char *name, cJSON **list,
                     char **out)
{
    struct tu_run r =
        tu_forumv(NULL, "--ledger", dir, "--json", "key", "list", NULL);
    cr_assert_eq(r.status, 0, "key list: %s", r.err);
    *list = tu_run_json(&r);
    if (out)
        *out = strdup(r.out);
    tu_run_free(&r);
    cJSON *k;
    cJSON_ArrayForEach (k, cJSON_GetObjectItemCaseSensitive(*list, "keys"))
        if (!strcmp(tu_str(k, "name"), name))
            return k;
    cr_assert_fail("key %s not listed", name);
    return NULL;
}

Test(gateway_keys, add_use_list_revoke_while_the_daemon_runs, .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    /* before any key: a made-up one is 401, in OpenAI's shape */
    char *r = NULL;
    cr_assert_eq(chat(&d, "fk_000000000000000000000000000000000000000000000000",
                      "fake-model", &r),
                 401);
    expect_error(r, 0, "authentication_error");
    free(r);
    const char *key = key_add(dir, "bot", NULL, NULL, NULL, NULL);
    /* the key as a bearer (taken without a restart), then as x-api-key
     * on /v1/messages (Anthropic), then with a session header */
    cr_assert_eq(chat_ok(&d, key), 200);
    char h[256];
    snprintf(h, sizeof(h), "x-api-key: %s\r\n", key);
    cr_assert_eq(call(&d, "/v1/messages", h, "fake-claude", &r), 200, "%s", r);
    free(r);
    snprintf(h, sizeof(h),
             "Authorization: Bearer %s\r\nX-Forum-Session: s9\r\n", key);
    cr_assert_eq(call(&d, "/v1/chat/completions", h, "fake-model", &r), 200);
    free(r);
    /* the daemon's token still opens the gateway: no key, no session */
    cr_assert_eq(chat_ok(&d, d.token), 200);
    cJSON *cs = calls(&d);
    cr_assert_eq(cJSON_GetArraySize(cs), 4);
    /* a key pasted into a prompt reaches the provider as sent, and the
     * witnessed copy has it redacted */
    char prompt[128];
    snprintf(prompt, sizeof(prompt), "my key is %s ok", key);
    snprintf(h, sizeof(h), "Authorization: Bearer %s\r\n", d.token);
    cr_assert_eq(
        call_text(&d, "/v1/chat/completions", h, "fake-model", prompt, &r),
        200);
    free(r);
    cr_expect(strstr(f->seen, key) != NULL, "the provider did not get it");
    static const char *const sess[] = {"key:bot", "key:bot", "s9", NULL};
    for (int i = 0; i < 4; i++) {
        const cJSON *c = cJSON_GetArrayItem(cs, i);
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(c, "key");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "session");
        if (i < 3) {
            cr_expect(cJSON_IsString(k) && !strcmp(k->valuestring, "bot"),
                      "call %d: no key name", i);
            cr_expect(cJSON_IsString(s) && !strcmp(s->valuestring, sess[i]),
                      "call %d: session", i);
        } else {
            cr_expect(!k && !s, "the token's call has a key or session");
        }
    }
    cJSON_Delete(cs);
    /* no entry holds the key itself, nor does any file of the data dir */
    cJSON *all = calls(&d);
    cr_assert_eq(cJSON_GetArraySize(all), 5);
    char *text = cJSON_PrintUnformatted(all);
    cr_expect(!strstr(text, key), "a witnessed call holds the key");
    cr_expect(strstr(text, "[redacted:") != NULL, "%s", text);
    free(text);
    cJSON_Delete(all);
    static const char *const files[] = {"ledger.db", "ledger.db-wal",
                                        "keys.json", "forum.log"};
    for (int i = 0; i < 4; i++) {
        char p[1024];
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        size_t len = 0;
        char *t = tu_read_file(p, &len);
        cr_expect(!t || !memmem(t, len, key, strlen(key)), "%s holds the key",
                  files[i]);
        free(t);
    }
    /* listed with what it used (3 calls of 10 tokens), never the key */
    cJSON *list = NULL;
    char *out = NULL;
    const cJSON *k = listed(dir, "bot", &list, &out);
    cr_expect_eq(tu_num(k, "used_calls"), 3);
    cr_expect_eq(tu_num(k, "used_tokens"), 30);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(k, "revoked")));
    cr_expect(!strstr(out, key) && !strstr(out, key + 3));
    free(out);
    cJSON_Delete(list);
    /* a second name is its own key; the same name again is refused */
    const char *key2 = key_add(dir, "other", NULL, NULL, NULL, NULL);
    struct tu_run rr =
        tu_forumv(NULL, "--ledger", dir, "key", "add", "bot", NULL);
    cr_expect_eq(rr.status, 2, "a name added twice: %d", rr.status);
    tu_run_free(&rr);
    /* revoked: 401 at once (Anthropic's shape on /v1/messages), the other
     * key and the token go on */
    rr = tu_forumv(NULL, "--ledger", dir, "key", "revoke", "bot", NULL);
    cr_assert_eq(rr.status, 0, "%s", rr.err);
    tu_run_free(&rr);
    cr_assert_eq(chat(&d, key, "fake-model", &r), 401);
    expect_error(r, 0, "authentication_error");
    free(r);
    snprintf(h, sizeof(h), "x-api-key: %s\r\n", key);
    cr_assert_eq(call(&d, "/v1/messages", h, "fake-claude", &r), 401);
    expect_error(r, 1, "authentication_error");
    free(r);
    cr_assert_eq(chat_ok(&d, key2), 200);
    cr_assert_eq(chat_ok(&d, d.token), 200);
    k = listed(dir, "bot", &list, NULL);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "revoked")));
    cJSON_Delete(list);
    rr = tu_forumv(NULL, "--ledger", dir, "key", "revoke", "nobody", NULL);
    cr_expect_eq(rr.status, 1, "revoking no such key: %d", rr.status);
    tu_run_free(&rr);
    /* a revoked key opens nothing else either */
    cr_assert_eq(chat(&d, key, "fake-model", &r), 401);
    free(r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(gateway_keys, max_calls_is_429_with_retry_after_across_a_restart,
     .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *key = key_add(dir, "two", "--max-calls", "2", NULL, NULL);
    cr_assert_eq(chat_ok(&d, key), 200);
    cr_assert_eq(chat_ok(&d, key), 200);
    char *r = NULL;
    cr_assert_eq(chat(&d, key, "fake-model", &r), 429, "%s", r);
    cr_expect(retry_after(r) >= 1, "no Retry-After: %s", r);
    expect_error(r, 0, "insufficient_quota");
    free(r);
    char h[256];
    snprintf(h, sizeof(h), "x-api-key: %s\r\n", key);
    cr_assert_eq(call(&d, "/v1/messages", h, "fake-claude", &r), 429);
    cr_expect(retry_after(r) >= 1);
    expect_error(r, 1, "rate_limit_error");
    free(r);
    /* refused calls are not witnessed and reach no provider */
    cJSON *cs = calls(&d);
    cr_expect_eq(cJSON_GetArraySize(cs), 2);
    cJSON_Delete(cs);
    cr_expect_eq(f->count[R_TASK], 2);
    /* the budget holds over a restart: counted from the ledger */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    tu_daemon_start(&d, dir, NULL);
    cr_assert_eq(chat(&d, key, "fake-model", &r), 429, "%s", r);
    cr_expect(retry_after(r) >= 1);
    free(r);
    cr_assert_eq(chat_ok(&d, d.token), 200); /* the token has no budget */
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(gateway_keys, max_tokens_is_429_once_spent, .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    /* each call uses 10 tokens (7 in, 3 out): the third is refused */
    const char *key = key_add(dir, "tok", "--max-tokens", "15", NULL, NULL);
    cr_assert_eq(chat_ok(&d, key), 200);
    cr_assert_eq(chat_ok(&d, key), 200);
    char *r = NULL;
    cr_assert_eq(chat(&d, key, "fake-model", &r), 429, "%s", r);
    cr_expect(retry_after(r) >= 1);
    free(r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(gateway_keys, rpm_is_429_with_retry_after_within_the_minute,
     .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *key = key_add(dir, "slow", "--rpm", "2", NULL, NULL);
    const char *free_key = key_add(dir, "free", NULL, NULL, NULL, NULL);
    cr_assert_eq(chat_ok(&d, key), 200);
    cr_assert_eq(chat_ok(&d, key), 200);
    char *r = NULL;
    cr_assert_eq(chat(&d, key, "fake-model", &r), 429, "%s", r);
    long ra = retry_after(r);
    cr_expect(ra >= 1 && ra <= 60, "Retry-After %ld", ra);
    expect_error(r, 0, "rate_limit_exceeded");
    free(r);
    /* another key has its own window */
    cr_assert_eq(chat_ok(&d, free_key), 200);
    cr_assert_eq(chat_ok(&d, free_key), 200);
    cr_assert_eq(chat_ok(&d, free_key), 200);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(gateway_keys, models_outside_the_list_are_403, .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *key = key_add(dir, "m", "--models", "fake-model", NULL, NULL);
    cr_assert_eq(chat_ok(&d, key), 200);
    char *r = NULL;
    /* the tier cheap is served by the provider of fake-model: allowed */
    cr_assert_eq(chat(&d, key, "cheap", &r), 200, "%s", r);
    free(r);
    cr_assert_eq(chat(&d, key, "other-model", &r), 403, "%s", r);
    expect_error(r, 0, "permission_error");
    cr_expect(strstr(r, "other-model") != NULL);
    free(r);
    char h[256];
    snprintf(h, sizeof(h), "x-api-key: %s\r\n", key);
    cr_assert_eq(call(&d, "/v1/messages", h, "fake-claude", &r), 403);
    expect_error(r, 1, "permission_error");
    free(r);
    cJSON *cs = calls(&d);
    cr_expect_eq(cJSON_GetArraySize(cs), 2);
    cJSON_Delete(cs);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

Test(gateway_keys, the_key_file_is_private_and_holds_only_hashes)
{
    char *dir = tu_tmpdir();
    struct tu_run r = tu_forumv(NULL, "--ledger", dir, "ledger", "init", NULL);
    cr_assert_eq(r.status, 0);
    tu_run_free(&r);
    const char *key =
        key_add(dir, "ci", "--rpm", "5", "--models", "cheap,fake-model");
    char p[1024];
    snprintf(p, sizeof(p), "%s/keys.json", dir);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    size_t len = 0;
    char *text = tu_read_file(p, &len);
    cr_assert(text);
    cr_expect(!strstr(text, key) && !strstr(text, key + 3), "the key in clear");
    uint8_t d[32];
    char hex[65];
    fo_sha256(key, strlen(key), d);
    fo_hex(d, sizeof(d), hex);
    cr_expect(strstr(text, hex) != NULL, "no SHA-256 of the key");
    free(text);
    /* a file others may read is refused, not used */
    cr_assert_eq(chmod(p, 0644), 0);
    r = tu_forumv(NULL, "--ledger", dir, "key", "list", NULL);
    cr_expect_neq(r.status, 0);
    cr_expect(strstr(r.err, "chmod 600") != NULL, "%s", r.err);
    tu_run_free(&r);
    cr_assert_eq(chmod(p, 0600), 0);
    /* bad input: exit 2, nothing written */
    r = tu_forumv(NULL, "--ledger", dir, "key", "add", "bad name", NULL);
    cr_expect_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "key", "add", "x", "--rpm", "0", NULL);
    cr_expect_eq(r.status, 2);
    tu_run_free(&r);
    r = tu_forumv(NULL, "--ledger", dir, "key", "list", NULL);
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "ci\t") && !strstr(r.out, "x\t"), "%s", r.out);
    tu_run_free(&r);
    tu_rmrf(dir);
}

Test(gateway_keys, metrics_count_each_key, .timeout = 120)
{
    struct fake *f = fake_start(answer_hi);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *key =
        key_add(dir, "met", "--max-calls", "1", "--models", "fake-model");
    cr_assert_eq(chat_ok(&d, key), 200);
    cr_assert_eq(chat_ok(&d, key), 429);
    char *r = NULL;
    cr_assert_eq(chat(&d, key, "other-model", &r), 403);
    free(r);
    key_add(dir, "idle", NULL, NULL, NULL, NULL);
    cr_assert_eq(tu_http(&d, "GET", "/metrics", NULL, 1, &r), 200);
    cr_expect(strstr(r, "forum_gateway_key_calls_total{key=\"met\"} 1\n"), "%s",
              r);
    cr_expect(strstr(r, "forum_gateway_key_tokens_total{key=\"met\"} 10\n"));
    cr_expect(strstr(r, "forum_gateway_key_refused_total{key=\"met\","
                        "status=\"429\"} 1\n"));
    cr_expect(strstr(r, "forum_gateway_key_refused_total{key=\"met\","
                        "status=\"403\"} 1\n"));
    /* a key added while the daemon runs is listed at once */
    cr_expect(strstr(r, "forum_gateway_key_calls_total{key=\"idle\"} 0\n"));
    cr_expect(!strstr(r, key));
    free(r);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}

/* A call in flight counts against --max-calls: with one call held at the
 * provider, a second with the same key is 429 at once (it never reaches
 * the provider), and the held one then completes. */
Test(gateway_keys, a_call_in_flight_counts_against_max_calls, .timeout = 120)
{
    atomic_store(&tu_held_hold, 1);
    struct fake *f = fake_start(tu_held_script);
    char *dir = tu_tmpdir();
    struct tu_daemon d;
    start(&d, dir, f);
    const char *key = key_add(dir, "one", "--max-calls", "1", NULL, NULL);
    /* held: the fake holds a "coordinator" prompt until told */
    char body[256], req[1024];
    int bl = snprintf(body, sizeof(body),
                      "{\"model\":\"fake-model\",\"messages\":[{\"role\":"
                      "\"system\",\"content\":\"You are the coordinator\"},"
                      "{\"role\":\"user\",\"content\":\"plan\"}]}");
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: "
                     "127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %d\r\n\r\n%s",
                     key, bl, body);
    int fd = tu_connect_loopback(d.port, 0);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    tu_held_wait_coord(1);
    char *r = NULL;
    cr_assert_eq(chat(&d, key, "fake-model", &r), 429, "%s", r);
    cr_expect(retry_after(r) >= 1);
    free(r);
    atomic_store(&tu_held_hold, 0);
    char buf[65536];
    size_t len = 0;
    char *b = NULL;
    cr_assert_eq(tu_http_read_reply(fd, buf, sizeof(buf), &len, &b), 200);
    free(b);
    close(fd);
    cr_expect_eq(atomic_load(&tu_held_coord_calls), 1);
    cr_expect_eq(f->count[R_TASK], 0, "the refused call reached the model");
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 30000), 0);
    fake_stop(f);
    fake_free(f);
    tu_rmrf(dir);
}
