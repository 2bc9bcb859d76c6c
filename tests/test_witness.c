/* test_witness: C2SP tlog-cosignature (cosignature/v1). A known-answer
 * vector made with Go's golang.org/x/mod/sumdb/note and a cosignature/v1
 * signer written from the spec (tests/vectors/cosignature-v1.json), round
 * trips, every refusal, the ledger accepting cosignatures by its named
 * witnesses only (CLI, HTTP, MCP), k of n on verify, and Go opening a
 * note forum's witness cosigned. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ledger/cosig.h"
#include "ledger/fo_buf.h"
#include "ledger/note.h"
#include "tests/testutil.h"
#include "tests/tu_daemon.h"

static const char *vstr(const cJSON *v, const char *k)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, k);
    cr_assert(cJSON_IsString(s), "vector: %s", k);
    return s->valuestring;
}

/* The text of a signed note: up to the blank line, with its newline. */
static size_t text_len(const char *note)
{
    const char *b = strstr(note, "\n\n");
    cr_assert_not_null(b);
    return (size_t)(b - note) + 1;
}

Test(cosig, known_answer_vector_made_with_go)
{
    cJSON *v = tu_vector("cosignature-v1.json");
    struct fo_err err;
    const char *note = vstr(v, "note"), *cosigned = vstr(v, "cosigned");
    uint64_t t =
        (uint64_t)cJSON_GetObjectItemCaseSensitive(v, "time")->valuedouble;

    /* The log's note is ours byte for byte (Ed25519 is deterministic). */
    struct note_signer *log = NULL;
    const char *lk = vstr(v, "log_skey");
    cr_assert_eq(note_signer_parse(lk, strlen(lk), &log, &err), FO_OK, "%s",
                 err.msg);
    struct fo_buf b;
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_sign(log, note, text_len(note), &b, &err), FO_OK);
    cr_assert_str_eq(b.data, note);
    fo_buf_release(&b);

    /* The witness key: its verifier key, and the cosignature Go made. */
    struct cosig_signer *w = NULL;
    const char *wk = vstr(v, "witness_skey");
    cr_assert_eq(cosig_signer_parse(wk, strlen(wk), &w, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_str_eq(cosig_signer_name(w), vstr(v, "witness_name"));
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(cosig_signer_format_verifier(w, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, vstr(v, "witness_vkey"));
    fo_buf_reset(&b);
    cr_assert_eq(cosig_signer_format(w, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, wk);
    fo_buf_reset(&b);
    cr_assert_eq(fo_buf_puts(&b, note), FO_OK);
    cr_assert_eq(cosig_sign(w, note, text_len(note), t, &b, &err), FO_OK);
    cr_assert_str_eq(b.data, cosigned, "our cosignature differs from Go's");
    fo_buf_release(&b);

    /* The signed message, as the spec spells it. */
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(cosig_message(note, text_len(note), t, &b, &err), FO_OK);
    cr_assert(!strncmp(b.data, "cosignature/v1\ntime 1679315147\nforum/", 37),
              "%s", b.data);
    fo_buf_release(&b);

    /* Go's cosigned note checks here: 1 of 1. */
    struct cosig_verifier *wv = NULL;
    const char *wvk = vstr(v, "witness_vkey");
    cr_assert_eq(cosig_verifier_parse(wvk, strlen(wvk), &wv, &err), FO_OK);
    int ok = 0;
    uint64_t ts = 0;
    size_t valid = 0;
    cr_assert_eq(cosig_check_note(cosigned, strlen(cosigned),
                                  (const struct cosig_verifier *const *)&wv, 1,
                                  &ok, &ts, &valid, &err),
                 FO_OK, "%s", err.msg);
    cr_assert_eq(valid, 1);
    cr_assert_eq(ts, t);
    /* The log's own signature still opens with note_open. */
    struct note_verifier *lv = NULL;
    const char *lvk = vstr(v, "log_vkey");
    cr_assert_eq(note_verifier_parse(lvk, strlen(lvk), &lv, &err), FO_OK);
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(note_open(cosigned, strlen(cosigned),
                           (const struct note_verifier *const *)&lv, 1, &b,
                           &err),
                 FO_OK, "%s", err.msg);
    fo_buf_release(&b);

    /* Over another checkpoint: the same line on a changed text fails. */
    char *other = strdup(cosigned);
    char *sz = strchr(other, '\n') + 1; /* the size line: "20" */
    sz[1] = '1';
    cr_assert_eq(cosig_check_note(other, strlen(other),
                                  (const struct cosig_verifier *const *)&wv, 1,
                                  &ok, &ts, &valid, &err),
                 FO_E_VERIFY);
    cr_assert(strstr(err.msg, "invalid cosignature by witness.example.com/w1"),
              "%s", err.msg);
    free(other);
    /* A flipped signature bit, and a changed timestamp. */
    other = strdup(cosigned);
    char *last = strrchr(other, ' ') + 1;
    last[20] = last[20] == 'A' ? 'B' : 'A';
    cr_assert_eq(cosig_check_note(other, strlen(other),
                                  (const struct cosig_verifier *const *)&wv, 1,
                                  &ok, &ts, &valid, &err),
                 FO_E_VERIFY);
    free(other);
    other = strdup(cosigned);
    last = strrchr(other, ' ') + 1;
    last[12] = last[12] == 'A' ? 'B' : 'A'; /* inside the timestamp */
    cr_assert_eq(cosig_check_note(other, strlen(other),
                                  (const struct cosig_verifier *const *)&wv, 1,
                                  &ok, &ts, &valid, &err),
                 FO_E_VERIFY);
    free(other);
    /* Another witness's key: not counted. */
    struct cosig_signer *w2 = NULL;
    struct cosig_verifier *wv2 = NULL;
    cr_assert_eq(cosig_signer_generate("witness.example.com/w2", &w2, &err),
                 FO_OK);
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(cosig_signer_format_verifier(w2, &b, &err), FO_OK);
    cr_assert_eq(cosig_verifier_parse(b.data, b.len, &wv2, &err), FO_OK);
    fo_buf_release(&b);
    cr_assert_eq(cosig_check_note(cosigned, strlen(cosigned),
                                  (const struct cosig_verifier *const *)&wv2, 1,
                                  &ok, &ts, &valid, &err),
                 FO_OK);
    cr_assert_eq(valid, 0);
    cr_assert_eq(ok, 0);

    /* Keys: the 0x01 (log) form is not a witness key; a wrong id fails. */
    cr_assert_eq(cosig_verifier_parse(lvk, strlen(lvk), &wv2, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "0x01") && strstr(err.msg, "want 0x04"), "%s",
              err.msg);
    char *bad = strdup(wvk);
    char *plus = strchr(bad, '+');
    plus[1] = plus[1] == '0' ? '1' : '0';
    cr_assert_eq(cosig_verifier_parse(bad, strlen(bad), &wv2, &err),
                 FO_E_INVALID);
    free(bad);
    /* A timestamp over 2^63 - 1 is refused. */
    fo_buf_init(&b, FO_BUF_UNLIMITED);
    cr_assert_eq(
        cosig_sign(w, note, text_len(note), (uint64_t)INT64_MAX + 1, &b, &err),
        FO_E_INVALID);
    fo_buf_release(&b);

    cosig_signer_free(w);
    cosig_signer_free(w2);
    cosig_verifier_free(wv);
    cosig_verifier_free(wv2);
    note_verifier_free(lv);
    note_signer_free(log);
    cJSON_Delete(v);
}

Test(cosig, round_trip_of_fresh_keys)
{
    struct fo_err err;
    for (int i = 0; i < 20; i++) {
        struct cosig_signer *s = NULL;
        struct cosig_verifier *v = NULL;
        cr_assert_eq(cosig_signer_generate("w.example/x", &s, &err), FO_OK);
        struct fo_buf k, vk, line;
        fo_buf_init(&k, FO_BUF_UNLIMITED);
        fo_buf_init(&vk, FO_BUF_UNLIMITED);
        fo_buf_init(&line, FO_BUF_UNLIMITED);
        cr_assert_eq(cosig_signer_format(s, &k, &err), FO_OK);
        struct cosig_signer *s2 = NULL;
        cr_assert_eq(cosig_signer_parse(k.data, k.len, &s2, &err), FO_OK);
        cr_assert_eq(cosig_signer_format_verifier(s2, &vk, &err), FO_OK);
        cr_assert_eq(cosig_verifier_parse(vk.data, vk.len, &v, &err), FO_OK);
        struct fo_buf again;
        fo_buf_init(&again, FO_BUF_UNLIMITED);
        cr_assert_eq(cosig_verifier_format(v, &again, &err), FO_OK);
        cr_assert_str_eq(again.data, vk.data);
        const char *text =
            "o\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";
        cr_assert_eq(
            cosig_sign(s, text, strlen(text), (uint64_t)i, &line, &err), FO_OK);
        uint64_t ts = 99;
        cr_assert_eq(cosig_verify_line(v, text, strlen(text), line.data,
                                       line.len - 1, &ts, &err),
                     FO_OK, "%s", err.msg);
        cr_assert_eq(ts, (uint64_t)i);
        cosig_signer_free(s);
        cosig_signer_free(s2);
        cosig_verifier_free(v);
        fo_buf_release(&k);
        fo_buf_release(&vk);
        fo_buf_release(&line);
        fo_buf_release(&again);
    }
}

/* ---- the ledger: witnesses, cosign, served, verify k of n ---- */

static struct tu_run forum(const char *a, ...)
{
    const char *argv[40];
    int n = 0;
    va_list ap;
    va_start(ap, a);
    for (const char *s = a; s && n < 39; s = va_arg(ap, const char *))
        argv[n++] = s;
    va_end(ap);
    argv[n] = NULL;
    return tu_forum(NULL, 0, argv);
}

#define EXPECT(want, ...)                                                      \
    do {                                                                       \
        struct tu_run r_ = forum(__VA_ARGS__, NULL);                           \
        cr_assert_eq(r_.status, want, "line %d: exit %d\n%s%s", __LINE__,      \
                     r_.status, r_.out, r_.err);                               \
        tu_run_free(&r_);                                                      \
    } while (0)

/* Writes stdout of a successful run to path. */
static void to_file(const char *path, struct tu_run r)
{
    cr_assert_eq(r.status, 0, "exit %d\n%s%s", r.status, r.out, r.err);
    cr_assert_eq(tu_write_file(path, r.out, r.out_len), 0);
    tu_run_free(&r);
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    int found = 0;
    while (path && !found && *path) {
        size_t n = strcspn(path, ":");
        char full[1024];
        snprintf(full, sizeof(full), "%.*s/%s", (int)n, n ? path : ".", prog);
        found = access(full, X_OK) == 0;
        path += n + (path[n] == ':');
    }
    return found;
}

Test(witness, ledger_accepts_named_witnesses_only_and_verify_needs_k,
     .timeout = 120)
{
    char *work = tu_tmpdir();
    char led[256], p[16][300];
    snprintf(led, sizeof(led), "%s/ledger", work);
    enum { K1, K2, K3, V1, V2, V3, CP, CP2, C1, C2, C3, BAD, SERVED, LV, TL };
    const char *names[] = {"w1.key",      "w2.key",   "w3.key",  "w1.vkey",
                           "w2.vkey",     "w3.vkey",  "cp.note", "cp2.note",
                           "c1.note",     "c2.note",  "c3.note", "bad.note",
                           "served.note", "log.vkey", "tiles"};
    for (int i = 0; i <= TL; i++)
        snprintf(p[i], sizeof(p[i]), "%.200s/%s", work, names[i]);
    char at[8][800];
    for (int i = 0; i < 3; i++) {
        snprintf(at[i], sizeof(at[i]), "@%.290s", p[K1 + i]);
        snprintf(at[3 + i], sizeof(at[3 + i]), "@%.290s", p[V1 + i]);
    }
    snprintf(at[6], sizeof(at[6]), "@%.290s", p[LV]);

    EXPECT(0, "--ledger", led, "ledger", "init");
    for (int i = 0; i < 5; i++)
        EXPECT(0, "--ledger", led, "ledger", "append", "--actor", "a", "--kind",
               "k", "--payload", "{\"n\":1}");
    to_file(p[LV], forum("--ledger", led, "ledger", "key", NULL));
    /* three witness keys; the ledger names w1 and w2 */
    static const char *wn[] = {"witness.example.com/w1",
                               "witness.example.com/w2",
                               "witness.example.com/w3"};
    for (int i = 0; i < 3; i++)
        to_file(p[V1 + i],
                forum("witness", "keygen", wn[i], "--out", p[K1 + i], NULL));
    EXPECT(2, "witness", "keygen", wn[0], "--out", p[K1]); /* exists */
    EXPECT(0, "--ledger", led, "ledger", "witness", "add", at[3]);
    EXPECT(0, "--ledger", led, "ledger", "witness", "add", at[4]);
    EXPECT(2, "--ledger", led, "ledger", "witness", "add", at[4]); /* twice */
    EXPECT(2, "--ledger", led, "ledger", "witness", "add", at[6]); /* 0x01 */
    struct tu_run r =
        forum("--ledger", led, "--json", "ledger", "witness", "list", NULL);
    cJSON *j = tu_run_json(&r);
    cr_assert_eq(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "witnesses")),
        2);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* the checkpoint, cosigned by each witness */
    r = forum("--ledger", led, "--json", "ledger", "checkpoint", "--sign",
              NULL);
    j = tu_run_json(&r);
    cr_assert_eq(
        tu_write_file(p[CP], tu_str(j, "note"), strlen(tu_str(j, "note"))), 0);
    cJSON_Delete(j);
    tu_run_free(&r);
    for (int i = 0; i < 3; i++)
        to_file(p[C1 + i], forum("witness", "cosign", "--key", at[i], "--vkey",
                                 at[6], p[CP], NULL));
    /* a witness key is not a log key; a note the log did not sign is
     * refused (w1's cosigned note opened as if w1's key were... the log's
     * key of another ledger) */
    EXPECT(2, "witness", "cosign", "--key", at[0], "--vkey", at[3], p[CP]);
    char other[300], ovk[400];
    snprintf(other, sizeof(other), "%.200s/other", work);
    snprintf(ovk, sizeof(ovk), "%.200s/other.vkey", work);
    EXPECT(0, "--ledger", other, "ledger", "init");
    to_file(ovk, forum("--ledger", other, "ledger", "key", NULL));
    char atovk[420];
    snprintf(atovk, sizeof(atovk), "@%s", ovk);
    EXPECT(1, "witness", "cosign", "--key", at[0], "--vkey", atovk, p[CP]);

    /* w3 is not named: refused, nothing stored */
    r = forum("--ledger", led, "ledger", "cosign", p[C3], NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "unknown witness key witness.example.com/w3"), "%s",
              r.err);
    tu_run_free(&r);
    /* w1's cosignature moved onto another checkpoint: refused */
    EXPECT(0, "--ledger", led, "ledger", "append", "--actor", "a", "--kind",
           "k", "--payload", "1");
    r = forum("--ledger", led, "--json", "ledger", "checkpoint", "--sign",
              NULL);
    j = tu_run_json(&r);
    size_t c1len = 0;
    char *c1 = tu_read_file(p[C1], &c1len);
    const char *w1line = strstr(c1, "\xe2\x80\x94 witness.example.com/w1");
    struct fo_buf moved;
    fo_buf_init(&moved, FO_BUF_UNLIMITED);
    fo_buf_puts(&moved, tu_str(j, "note"));
    fo_buf_puts(&moved, w1line);
    cr_assert_eq(tu_write_file(p[BAD], moved.data, moved.len), 0);
    fo_buf_release(&moved);
    cJSON_Delete(j);
    tu_run_free(&r);
    r = forum("--ledger", led, "ledger", "cosign", p[BAD], NULL);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "over another checkpoint"), "%s", r.err);
    tu_run_free(&r);
    /* a note with only the log's signature: nothing to add */
    EXPECT(2, "--ledger", led, "ledger", "cosign", p[CP]);

    /* w1 through the CLI */
    r = forum("--ledger", led, "--json", "ledger", "cosign", p[C1], NULL);
    j = tu_run_json(&r);
    cr_assert_eq(tu_num(j, "cosignatures"), 1);
    cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "accepted");
    cr_assert_str_eq(tu_str(cJSON_GetArrayItem(acc, 0), "witness"), wn[0]);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* w2 through HTTP; GET /checkpoint serves the size-5 one? no: the
     * latest (size 6), so cosign size 6 there and check the stored size 5
     * through the tiles' checkpoint below. */
    struct tu_daemon d;
    tu_daemon_start(&d, led, "--checkpoint-ms", "0", NULL);
    size_t c2len = 0;
    char *c2 = tu_read_file(p[C2], &c2len);
    cJSON *in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "note", c2);
    char *body = cJSON_PrintUnformatted(in);
    cJSON *h = tu_http_json(&d, "POST", "/checkpoint/cosign", body, 200);
    cr_assert_eq(tu_num(h, "cosignatures"), 2);
    cr_assert_eq(tu_num(h, "size"), 5);
    cJSON_Delete(h);
    free(body);
    cJSON_Delete(in);
    /* w3's through HTTP: 400 */
    size_t c3len = 0;
    char *c3 = tu_read_file(p[C3], &c3len);
    in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "note", c3);
    body = cJSON_PrintUnformatted(in);
    h = tu_http_json(&d, "POST", "/checkpoint/cosign", body, 400);
    cr_assert_str_eq(tu_str(h, "code"), "invalid_input");
    cJSON_Delete(h);
    free(body);
    cJSON_Delete(in);
    h = tu_http_json(&d, "GET", "/checkpoint", NULL, 200);
    cr_assert_eq(tu_num(h, "size"), 6);
    cr_assert_null(strstr(tu_str(h, "note"), "witness.example.com"));
    cJSON_Delete(h);
    cr_assert_eq(tu_daemon_signal_wait(&d, SIGTERM, 10000), 0);
    /* the same over MCP (a second cosignature by w2 replaces the first) */
    in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "note", c2);
    body = cJSON_PrintUnformatted(in);
    h = tu_mcp_call(led, 0, "ledger_cosign", body);
    cr_assert_eq(tu_num(h, "cosignatures"), 2);
    cJSON_Delete(h);
    free(body);
    cJSON_Delete(in);

    /* served: the tiles' checkpoint carries both (sign nothing new: the
     * ledger's latest is size 6 without cosignatures; the size-5 note with
     * its cosignatures comes from `ledger cosign`'s answer) */
    r = forum("--ledger", led, "--json", "ledger", "cosign", p[C1], NULL);
    j = tu_run_json(&r);
    const char *served = tu_str(j, "note");
    cr_assert(strstr(served, "\xe2\x80\x94 witness.example.com/w1 "), "%s",
              served);
    cr_assert(strstr(served, "\xe2\x80\x94 witness.example.com/w2 "), "%s",
              served);
    cr_assert_eq(tu_write_file(p[SERVED], served, strlen(served)), 0);
    cJSON_Delete(j);
    tu_run_free(&r);

    /* verify: k of n */
    EXPECT(0, "--ledger", led, "verify", "--checkpoint", p[SERVED], "--vkey",
           at[6], "--witness", at[3], "--witness", at[4]);
    EXPECT(0, "--ledger", led, "verify", "--checkpoint", p[SERVED], "--vkey",
           at[6], "--witness", at[3], "--witness", at[4], "--witness", at[5],
           "--min-witnesses", "2");
    r = forum("--ledger", led, "--json", "verify", "--checkpoint", p[SERVED],
              "--vkey", at[6], "--witness", at[3], "--witness", at[4],
              "--witness", at[5], "--min-witnesses", "3", NULL);
    cr_assert_eq(r.status, 1, "%s%s", r.out, r.err);
    j = tu_run_json(&r);
    cr_assert_str_eq(tu_str(j, "reason"), "witnesses");
    cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "witnesses");
    cr_assert_eq(tu_num(ws, "valid"), 2);
    cJSON_Delete(j);
    tu_run_free(&r);
    EXPECT(1, "--ledger", led, "verify", "--checkpoint", p[CP], "--vkey", at[6],
           "--witness", at[3]);
    EXPECT(2, "--ledger", led, "verify", "--checkpoint", p[SERVED], "--vkey",
           at[6], "--witness", at[3], "--witness", at[3]);
    EXPECT(2, "--ledger", led, "verify", "--checkpoint", p[SERVED], "--vkey",
           at[6], "--witness", at[3], "--min-witnesses", "2");
    /* a forged line by a named witness fails, never skipped */
    char *s = tu_read_file(p[SERVED], NULL);
    char *w2l = strstr(s, "witness.example.com/w2 ");
    w2l[30] = w2l[30] == 'A' ? 'B' : 'A';
    cr_assert_eq(tu_write_file(p[BAD], s, strlen(s)), 0);
    free(s);
    EXPECT(1, "--ledger", led, "verify", "--checkpoint", p[BAD], "--vkey",
           at[6], "--witness", at[3], "--witness", at[4], "--min-witnesses",
           "1");
    /* and through `ledger verify --checkpoint` */
    EXPECT(0, "--ledger", led, "ledger", "verify", "--checkpoint", p[SERVED],
           "--vkey", at[6], "--witness", at[3], "--witness", at[4]);
    EXPECT(1, "--ledger", led, "ledger", "verify", "--checkpoint", p[SERVED],
           "--vkey", at[6], "--witness", at[5]);

    /* The latest checkpoint (size 6), cosigned by w1: served with it by
     * ledger_checkpoint, and in the tiles' checkpoint, which verify
     * --tiles checks against the witness too. */
    r = forum("--ledger", led, "--json", "ledger", "checkpoint", NULL);
    j = tu_run_json(&r);
    cr_assert_eq(tu_num(j, "size"), 6);
    cr_assert_eq(
        tu_write_file(p[CP2], tu_str(j, "note"), strlen(tu_str(j, "note"))), 0);
    cJSON_Delete(j);
    tu_run_free(&r);
    to_file(p[C1], forum("witness", "cosign", "--key", at[0], "--vkey", at[6],
                         p[CP2], NULL));
    EXPECT(0, "--ledger", led, "ledger", "cosign", p[C1]);
    h = tu_mcp_call(led, 0, "ledger_checkpoint", "{}");
    cr_assert_eq(tu_num(h, "size"), 6);
    cr_assert(strstr(tu_str(h, "note"), "\xe2\x80\x94 witness.example.com/w1 "),
              "%s", tu_str(h, "note"));
    cJSON_Delete(h);
    EXPECT(0, "--ledger", led, "ledger", "tiles", "--out", p[TL]);
    EXPECT(0, "verify", "--tiles", p[TL], "--vkey", at[6], "--witness", at[3]);
    EXPECT(1, "verify", "--tiles", p[TL], "--vkey", at[6], "--witness", at[3],
           "--witness", at[4]);

    /* Go opens the note forum's witness cosigned (cosignature/v1 verifier
     * written from the spec in tiles_check.go). */
    if (on_path("go")) {
        char script[512], out[800];
        snprintf(script, sizeof(script), "%s/tests/interop/go-run.sh",
                 FORUM_SRC);
        snprintf(out, sizeof(out), "%s/go.log", work);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
            execl("/bin/sh", "sh", script, "tiles_check.go", "-cosign-verify",
                  "-note", p[SERVED], "-vkey", p[LV], "-wkey", p[V2],
                  (char *)NULL);
            _exit(127);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        char *log = tu_read_file(out, NULL);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "Go: %s", log);
        cr_assert(strstr(log, "cosignature by witness.example.com/w2+"), "%s",
                  log);
        free(log);
    } else {
        fprintf(stderr, "witness: Go check skipped: `go` is not on PATH\n");
    }
    free(c1);
    free(c2);
    free(c3);
    tu_rmrf(work);
}
