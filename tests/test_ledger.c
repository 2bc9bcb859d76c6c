/* test_ledger: the ledger library: the chain, tampering done directly in
 * ledger.db, redaction, several writers, crashes, and injected faults. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <sqlite3.h>

#include "ledger/fo_json.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"
#include "ledger/proof.h"
#include "tests/testutil.h"

static struct ledger *open_new(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    int rc = ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &l, &err);
    cr_assert_eq(rc, FO_OK, "open: %s", err.msg);
    return l;
}

static struct ledger_entry append(struct ledger *l, const char *kind,
                                  int64_t parent, const char *body)
{
    struct ledger_entry e;
    struct fo_err err;
    int rc =
        ledger_append(l, "tester", kind, parent, body, strlen(body), &e, &err);
    cr_assert_eq(rc, FO_OK, "append: %s", err.msg);
    return e;
}

static void fill(struct ledger *l, int n)
{
    char body[64];
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof(body), "{\"i\":%d}", i);
        append(l, "step", i > 0 ? i - 1 : LEDGER_NO_PARENT, body);
    }
}

static struct ledger_verify_result verify(const char *dir, int deep)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "open: %s", err.msg);
    struct ledger_verify_result res;
    int rc =
        ledger_verify(l, deep ? LEDGER_VERIFY_DEEP : 0, NULL, NULL, &res, &err);
    cr_assert_eq(rc, FO_OK, "verify: %s", err.msg);
    ledger_close(l);
    return res;
}

static void sql(const char *dir, const char *stmt)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, stmt, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", stmt, msg ? msg : "");
    sqlite3_close(db);
}

static int64_t count(const char *dir)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK,
                 "open: %s", err.msg);
    int64_t n = -1;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    ledger_close(l);
    return n;
}

Test(ledger_chain, contiguous_linked_and_recomputable)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 50);
    uint8_t prev[32] = {0};
    int64_t last_ts = 0;
    for (int64_t s = 0; s < 50; s++) {
        struct ledger_entry e;
        int present = 0;
        struct fo_err err;
        cr_assert_eq(ledger_get(l, s, &e, &present, &err), FO_OK);
        cr_assert_eq(e.seq, s);
        cr_assert_eq(present, 1);
        cr_assert_eq(memcmp(e.prev, prev, 32), 0, "entry %lld prev",
                     (long long)s);
        cr_assert_geq(e.ts, last_ts);
        /* the hash recomputes from the served JSON */
        cJSON *j = ledger_entry_json(&e);
        struct ledger_entry back;
        cr_assert_eq(ledger_entry_from_json(j, &back, &err), FO_OK, "%s",
                     err.msg);
        cJSON_Delete(j);
        uint8_t h[32];
        cr_assert_eq(ledger_entry_hash(&back, h), FO_OK);
        cr_assert_eq(memcmp(h, e.hash, 32), 0);
        memcpy(prev, e.hash, 32);
        last_ts = e.ts;
    }
    struct ledger_verify_result r;
    struct fo_err err;
    cr_assert_eq(ledger_verify(l, LEDGER_VERIFY_DEEP, NULL, NULL, &r, &err),
                 FO_OK);
    cr_assert(r.ok && r.chain && r.deep == 1);
    cr_assert_eq(r.entries, 50);
    cr_assert_eq(r.bodies_checked, 50);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_chain, empty_ledger_verifies)
{
    char *dir = tu_tmpdir();
    ledger_close(open_new(dir));
    struct ledger_verify_result r = verify(dir, 1);
    cr_assert(r.ok);
    cr_assert_eq(r.entries, 0);
    tu_rmrf(dir);
}

Test(ledger_chain, causal_chain_root_first)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    append(l, "request", LEDGER_NO_PARENT, "{}"); /* 0 */
    append(l, "noise", LEDGER_NO_PARENT, "{}");   /* 1 */
    append(l, "plan", 0, "{}");                   /* 2 */
    append(l, "task", 2, "{}");                   /* 3 */
    append(l, "noise", 1, "{}");                  /* 4 */
    append(l, "result", 3, "{}");                 /* 5 */
    struct ledger_entry *v = NULL;
    size_t n = 0;
    struct fo_err err;
    cr_assert_eq(ledger_chain(l, 5, &v, &n, &err), FO_OK);
    cr_assert_eq(n, 4);
    const char *kinds[] = {"request", "plan", "task", "result"};
    for (size_t i = 0; i < n; i++)
        cr_assert_str_eq(v[i].kind, kinds[i]);
    free(v);
    cr_assert_eq(ledger_chain(l, 99, &v, &n, &err), FO_E_NOT_FOUND);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_append, rejects_bad_fields_without_writing)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 3);
    struct fo_err err;
    char big[200];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(ledger_append(l, "", "k", -1, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    cr_assert_eq(ledger_append(l, big, "k", -1, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "actor"));
    cr_assert_eq(ledger_append(l, "a", "Bad", -1, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "kind"));
    cr_assert_eq(ledger_append(l, "a", "k", 3, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "parent"));
    cr_assert_eq(ledger_append(l, "a", "k", -5, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    cr_assert_eq(ledger_append(l, "a\xff", "k", -1, "{}", 2, NULL, &err),
                 FO_E_INVALID);
    int64_t n = 0;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    cr_assert_eq(n, 3);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_append, body_limit_is_configurable)
{
    char *dir = tu_tmpdir();
    struct ledger_config cfg = {.max_body = 16};
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, &cfg, &l, &err), FO_OK);
    const char *ok = "{\"a\":\"1234567\"}"; /* 15 bytes */
    const char *big = "{\"a\":\"123456789\"}";
    cr_assert_eq(ledger_append(l, "a", "k", -1, ok, strlen(ok), NULL, &err),
                 FO_OK);
    cr_assert_eq(ledger_append(l, "a", "k", -1, big, strlen(big), NULL, &err),
                 FO_E_TOO_LARGE);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_append, batch_skips_invalid_and_keeps_seqs_contiguous)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    struct ledger_append reqs[4] = {
        {.actor = "a", .kind = "k", .parent = -1, .body = "{}", .body_len = 2},
        {.actor = "a",
         .kind = "BAD",
         .parent = -1,
         .body = "{}",
         .body_len = 2},
        {.actor = "a", .kind = "k", .parent = 0, .body = "{}", .body_len = 2},
        {.actor = "a", .kind = "k", .parent = 2, .body = "{}", .body_len = 2},
    };
    struct fo_err err;
    cr_assert_eq(ledger_append_batch(l, reqs, 4, &err), FO_OK);
    cr_assert_eq(reqs[0].rc, FO_OK);
    cr_assert_eq(reqs[1].rc, FO_E_INVALID);
    cr_assert_eq(reqs[2].rc, FO_OK);
    cr_assert_eq(reqs[2].entry.seq, 1);
    /* parent 2 is not below seq 2 */
    cr_assert_eq(reqs[3].rc, FO_E_INVALID);
    int64_t n;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    cr_assert_eq(n, 2);
    ledger_close(l);
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

Test(ledger_append, failed_commit_writes_nothing)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 5);
    ledger_fail_commit_after(l, 1);
    struct fo_err err;
    cr_assert_eq(ledger_append(l, "a", "k", -1, "{}", 2, NULL, &err), FO_E_IO);
    int64_t n;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    cr_assert_eq(n, 5);
    struct ledger_entry e = append(l, "k", -1, "{}");
    cr_assert_eq(e.seq, 5);
    ledger_close(l);
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

/* ---- tampering -------------------------------------------------------- */

Test(ledger_tamper, changed_field_is_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 20);
    ledger_close(l);
    sql(dir, "UPDATE entries SET actor = 'mallory' WHERE seq = 7");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 7);
    cr_assert_str_eq(r.reason, "hash_mismatch");
    tu_rmrf(dir);
}

Test(ledger_tamper, deleted_middle_entry_is_a_gap)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 20);
    ledger_close(l);
    sql(dir, "DELETE FROM entries WHERE seq = 11");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 11);
    cr_assert_str_eq(r.reason, "seq_gap");
    tu_rmrf(dir);
}

Test(ledger_tamper, swapped_entries_are_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 20);
    ledger_close(l);
    sql(dir,
        "CREATE TEMP TABLE t AS SELECT * FROM entries WHERE seq IN (4, 5);"
        "UPDATE entries SET (ts, actor, kind, parent, payload, prev, hash) ="
        " (SELECT ts, actor, kind, parent, payload, prev, hash FROM t"
        "  WHERE t.seq = 9 - entries.seq) WHERE seq IN (4, 5);");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 4);
    cr_assert_str_eq(r.reason, "prev_mismatch");
    tu_rmrf(dir);
}

Test(ledger_tamper, changed_body_fails_only_deep)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 20);
    ledger_close(l);
    sql(dir,
        "UPDATE bodies SET body = CAST('{\"i\":999}' AS BLOB) WHERE seq = 13");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert(r.ok, "plain verify does not read bodies");
    r = verify(dir, 1);
    cr_assert_not(r.ok);
    cr_assert(r.chain);
    cr_assert_eq(r.deep, 0);
    cr_assert_eq(r.bodies_bad, 1);
    cr_assert_eq(r.first_bad_body_seq, 13);
    /* and a bad body is never served */
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err), FO_OK);
    char *body = NULL;
    size_t len = 0;
    cr_assert_eq(ledger_body(l, 13, &body, &len, &err), FO_E_CORRUPT);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_tamper, changed_tree_node_is_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 20);
    ledger_close(l);
    /* the lowest stored level is LEDGER_TREE_MIN_LEVEL (4): the node over
     * leaves 0..15 completes at leaf 15 */
    sql(dir, "UPDATE tree SET hash = zeroblob(32) WHERE pos = (15 << 6) | 4");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 15);
    cr_assert_str_eq(r.reason, "tree_mismatch");
    tu_rmrf(dir);
}

Test(ledger_tamper, extra_tree_node_is_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 8);
    ledger_close(l);
    sql(dir, "INSERT INTO tree(pos, hash) VALUES ((9 << 6) | 1, zeroblob(32))");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_str_eq(r.reason, "tree_mismatch");
    tu_rmrf(dir);
}

Test(ledger_tamper, damaged_column_is_named_not_fatal)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 10);
    ledger_close(l);
    sql(dir, "UPDATE entries SET hash = x'00' WHERE seq = 3");
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 3);
    tu_rmrf(dir);
}

/* Rewrites entries from seq on with valid hashes (a "clean" rewrite by
 * someone with write access), after fix() changed something. */
static void rewrite_chain(const char *dir, int64_t from)
{
    struct ledger *l = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &l, &err), FO_OK);
    int64_t n;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK);
    struct ledger_entry prev;
    if (from > 0)
        cr_assert_eq(ledger_get(l, from - 1, &prev, NULL, &err), FO_OK);
    char path[512];
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    for (int64_t s = from; s < n; s++) {
        struct ledger_entry e;
        cr_assert_eq(ledger_get(l, s, &e, NULL, &err), FO_OK);
        if (s > 0)
            memcpy(e.prev, prev.hash, 32);
        cr_assert_eq(ledger_entry_hash(&e, e.hash), FO_OK);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(
            db, "UPDATE entries SET prev = ?1, hash = ?2 WHERE seq = ?3", -1,
            &st, NULL);
        sqlite3_bind_blob(st, 1, e.prev, 32, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, e.hash, 32, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, s);
        cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
        prev = e;
    }
    sqlite3_close(db);
    ledger_close(l);
}

Test(ledger_tamper, ts_backwards_and_bad_parent_are_named)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 10);
    ledger_close(l);
    sql(dir, "UPDATE entries SET ts = 5 WHERE seq = 6");
    rewrite_chain(dir, 6);
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_eq(r.first_bad_seq, 6);
    cr_assert_str_eq(r.reason, "ts_backwards");

    char *dir2 = tu_tmpdir();
    l = open_new(dir2);
    fill(l, 10);
    ledger_close(l);
    sql(dir2, "UPDATE entries SET parent = 8 WHERE seq = 8");
    rewrite_chain(dir2, 8);
    r = verify(dir2, 0);
    cr_assert_eq(r.first_bad_seq, 8);
    cr_assert_str_eq(r.reason, "bad_parent");
    tu_rmrf(dir);
    tu_rmrf(dir2);
}

Test(ledger_tamper, clean_rewrite_is_caught_by_the_tree)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 16);
    ledger_close(l);
    sql(dir, "UPDATE entries SET actor = 'mallory' WHERE seq = 9");
    rewrite_chain(dir, 9);
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_str_eq(r.reason, "tree_mismatch");
    /* named at the first stored subtree over it: leaves 0..15 */
    cr_assert_eq(r.first_bad_seq, 15);
    tu_rmrf(dir);
}

/* ---- redaction -------------------------------------------------------- */

static int file_contains(const char *path, const char *needle)
{
    size_t len = 0;
    char *data = tu_read_file(path, &len);
    if (!data)
        return 0;
    size_t n = strlen(needle);
    int found = 0;
    for (size_t i = 0; i + n <= len && !found; i++)
        found = memcmp(data + i, needle, n) == 0;
    free(data);
    return found;
}

Test(ledger_redact, body_gone_chain_and_deep_verify_ok)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 5);
    const char *secret = "{\"ssn\":\"SECRET-4242-MARKER\"}";
    struct ledger_entry s1 = append(l, "secret", 2, secret);
    append(l, "other", -1, "{}");
    struct ledger_entry s2 =
        append(l, "secret", -1, secret); /* a second copy */
    struct ledger_entry red;
    struct fo_err err;
    cr_assert_eq(ledger_redact(l, s1.seq, "pii", &red, &err), FO_OK, "%s",
                 err.msg);
    cr_assert_str_eq(red.kind, "redaction");
    cr_assert_str_eq(red.actor, "admin");
    cr_assert_eq(red.parent, s1.seq);
    char *body = NULL;
    size_t len;
    cr_assert_eq(ledger_body(l, s1.seq, &body, &len, &err), FO_E_REDACTED);
    cr_assert_eq(ledger_body(l, s2.seq, &body, &len, &err), FO_E_REDACTED,
                 "every copy of the payload goes");
    int present = 1;
    struct ledger_entry e;
    cr_assert_eq(ledger_get(l, s1.seq, &e, &present, &err), FO_OK);
    cr_assert_eq(present, 0);
    /* the redaction body names the payload hash and the reason */
    cr_assert_eq(ledger_body(l, red.seq, &body, &len, &err), FO_OK);
    char hex[65];
    fo_hex(s1.payload, 32, hex);
    cr_assert(strstr(body, hex));
    cr_assert(strstr(body, "\"reason\":\"pii\""));
    free(body);
    cr_assert_eq(ledger_redact(l, s1.seq, "again", NULL, &err), FO_E_REDACTED);
    ledger_close(l);

    struct ledger_verify_result r = verify(dir, 1);
    cr_assert(r.ok);
    cr_assert_eq(r.bodies_redacted, 2);
    char path[512];
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    cr_assert_not(file_contains(path, "SECRET-4242-MARKER"),
                  "redacted bytes left in ledger.db");
    snprintf(path, sizeof(path), "%s/ledger.db-wal", dir);
    cr_assert_not(file_contains(path, "SECRET-4242-MARKER"),
                  "redacted bytes left in the WAL");
    tu_rmrf(dir);
}

/* ---- several processes ------------------------------------------------ */

Test(ledger_procs, two_writers_append_contiguously)
{
    char *dir = tu_tmpdir();
    ledger_close(open_new(dir));
    enum { PER = 150, WRITERS = 3 };
    pid_t kids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        kids[w] = fork();
        cr_assert_neq(kids[w], -1);
        if (kids[w] == 0) {
            struct ledger *l = NULL;
            struct fo_err err;
            if (ledger_open(dir, 0, NULL, &l, &err) != FO_OK)
                _exit(10);
            char actor[16];
            snprintf(actor, sizeof(actor), "w%d", w);
            for (int i = 0; i < PER; i++) {
                if (ledger_append(l, actor, "k", -1, "{}", 2, NULL, &err) !=
                    FO_OK) {
                    fprintf(stderr, "append: %s\n", err.msg);
                    _exit(11);
                }
            }
            ledger_close(l);
            _exit(0);
        }
    }
    for (int w = 0; w < WRITERS; w++) {
        int st;
        waitpid(kids[w], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d failed", w);
    }
    cr_assert_eq(count(dir), PER * WRITERS);
    struct ledger_verify_result r = verify(dir, 1);
    cr_assert(r.ok, "verify: %s at %lld", r.reason, (long long)r.first_bad_seq);
    tu_rmrf(dir);
}

Test(ledger_crash, sigkill_loses_no_acknowledged_append, .timeout = 120)
{
    char *dir = tu_tmpdir();
    ledger_close(open_new(dir));
    srand((unsigned)time(NULL));
    int64_t total_acked = 0;
    for (int round = 0; round < 20; round++) {
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        pid_t kid = fork();
        cr_assert_neq(kid, -1);
        if (kid == 0) {
            close(fds[0]);
            struct ledger *l = NULL;
            struct fo_err err;
            if (ledger_open(dir, 0, NULL, &l, &err) != FO_OK)
                _exit(10);
            for (int i = 0;; i++) {
                struct ledger_entry e;
                char body[64];
                snprintf(body, sizeof(body), "{\"round\":%d,\"i\":%d}", round,
                         i);
                /* alternate single appends and batches */
                if (i % 3 == 2) {
                    struct ledger_append reqs[8];
                    for (int k = 0; k < 8; k++)
                        reqs[k] =
                            (struct ledger_append){.actor = "crash",
                                                   .kind = "batch",
                                                   .parent = -1,
                                                   .body = body,
                                                   .body_len = strlen(body)};
                    if (ledger_append_batch(l, reqs, 8, &err) != FO_OK)
                        _exit(11);
                    for (int k = 0; k < 8; k++)
                        dprintf(fds[1], "%lld\n", (long long)reqs[k].entry.seq);
                } else {
                    if (ledger_append(l, "crash", "one", -1, body, strlen(body),
                                      &e, &err) != FO_OK)
                        _exit(11);
                    dprintf(fds[1], "%lld\n", (long long)e.seq);
                }
            }
        }
        close(fds[1]);
        usleep((useconds_t)(2000 + rand() % 40000));
        kill(kid, SIGKILL);
        int st;
        waitpid(kid, &st, 0);
        cr_assert(WIFSIGNALED(st), "child exited on its own: %d",
                  WEXITSTATUS(st));
        /* read every seq the child saw committed */
        FILE *f = fdopen(fds[0], "r");
        long long seq, max_acked = -1;
        int64_t acked = 0;
        while (fscanf(f, "%lld", &seq) == 1) {
            if (seq > max_acked)
                max_acked = seq;
            acked++;
        }
        fclose(f);
        total_acked += acked;
        int64_t n = count(dir);
        cr_assert_gt(n, max_acked,
                     "round %d: acknowledged seq %lld missing (count %lld)",
                     round, max_acked, (long long)n);
        struct ledger_verify_result r = verify(dir, 1);
        cr_assert(r.ok, "round %d: verify failed: %s at %lld", round,
                  r.reason ? r.reason : "bodies", (long long)r.first_bad_seq);
    }
    cr_assert_gt(total_acked, 0);
    tu_rmrf(dir);
}

Test(ledger_body, by_hash_and_json_helper)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    cJSON *v = cJSON_Parse("{\"b\":2,\"a\":[1,2]}");
    struct ledger_entry e;
    struct fo_err err;
    cr_assert_eq(ledger_append_json(l, "a", "k", -1, v, &e, &err), FO_OK);
    cJSON_Delete(v);
    char *body = NULL;
    size_t len = 0;
    cr_assert_eq(ledger_body_by_hash(l, e.payload, &body, &len, &err), FO_OK);
    cr_assert_str_eq(body, "{\"a\":[1,2],\"b\":2}");
    free(body);
    uint8_t none[32] = {1};
    cr_assert_eq(ledger_body_by_hash(l, none, &body, &len, &err),
                 FO_E_NOT_FOUND);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_verify, the_bench_seam_without_a_tree_fails_verify)
{
    /* ledger_bench_skip_tree exists to price the tree; what it writes must
     * never pass for a ledger */
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    struct fo_err err;
    cr_assert_eq(
        ledger_append(l, "a", "k", LEDGER_NO_PARENT, "1", 1, NULL, &err),
        FO_OK);
    ledger_bench_skip_tree(l, 1);
    for (int i = 0; i < 20; i++) /* past a stored subtree of 16 */
        cr_assert_eq(
            ledger_append(l, "a", "k", LEDGER_NO_PARENT, "2", 1, NULL, &err),
            FO_OK, "%s", err.msg);
    struct ledger_verify_result res;
    cr_assert_eq(ledger_verify(l, 0, NULL, NULL, &res, &err), FO_OK);
    cr_assert(!res.ok);
    cr_assert_str_eq(res.reason, "tree_mismatch");
    ledger_close(l);
    tu_rmrf(dir);
}

/* Ledgers made before tree_min_level existed store every level (the meta
 * key is absent): they still append and verify, and a low node is still
 * checked. */
Test(ledger_tree, a_ledger_storing_every_level_still_works)
{
    char *dir = tu_tmpdir();
    struct ledger *l = NULL;
    struct fo_err err;
    struct ledger_config cfg = {.tree_min_level = 1};
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, &cfg, &l, &err), FO_OK);
    fill(l, 20);
    ledger_close(l);
    sql(dir, "DELETE FROM meta WHERE key = 'tree_min_level'");
    l = open_new(dir);
    fill(l, 5);
    ledger_close(l);
    struct ledger_verify_result r = verify(dir, 0);
    cr_assert(r.ok, "%s at %lld", r.reason, (long long)r.first_bad_seq);
    sql(dir, "UPDATE tree SET hash = zeroblob(32) WHERE pos = (11 << 6) | 2");
    r = verify(dir, 0);
    cr_assert_not(r.ok);
    cr_assert_eq(r.first_bad_seq, 11);
    tu_rmrf(dir);
}

/* Proofs hold whatever level is stored: every inclusion proof of a ledger
 * storing only level 8 and up verifies against its root. */
Test(ledger_tree, proofs_hold_whatever_level_is_stored)
{
    for (unsigned lvl = 1; lvl <= 8; lvl += 7) {
        char *dir = tu_tmpdir();
        struct ledger *l = NULL;
        struct fo_err err;
        struct ledger_config c = {.tree_min_level = lvl};
        cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, &c, &l, &err), FO_OK);
        fill(l, 300);
        struct ledger_verify_result r;
        cr_assert_eq(ledger_verify(l, 0, NULL, NULL, &r, &err), FO_OK);
        cr_assert(r.ok);
        for (int64_t size = 1; size <= 300; size += 37) {
            uint8_t root[32];
            cr_assert_eq(ledger_root(l, size, root, &err), FO_OK, "%s",
                         err.msg);
            for (int64_t i = 0; i < size; i += 5) {
                struct ledger_inclusion p;
                cr_assert_eq(ledger_prove_inclusion(l, i, size, &p, &err),
                             FO_OK);
                cr_assert_eq(memcmp(p.root, root, 32), 0);
                cr_assert_eq(merkle_verify_inclusion(
                                 p.leaf_hash, (uint64_t)i, (uint64_t)size,
                                 (const uint8_t(*)[32])p.path, p.path_len, root,
                                 &err),
                             FO_OK, "level %u index %lld size %lld: %s", lvl,
                             (long long)i, (long long)size, err.msg);
            }
        }
        ledger_close(l);
        tu_rmrf(dir);
    }
}

/* Each handle keeps the head of its last append; two handles taking turns
 * on one ledger (as two processes would) must each notice the other's
 * appends, so every leaf lands in the tree exactly once. */
Test(ledger_tree, two_handles_taking_turns_keep_one_tree)
{
    char *dir = tu_tmpdir();
    struct ledger *a = open_new(dir), *b = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &b, &err), FO_OK, "%s", err.msg);
    unsigned seed = 7;
    for (int i = 0; i < 300; i++) {
        seed = seed * 1103515245u + 12345u;
        /* runs of 1 to 4 on one handle, then a switch */
        struct ledger *l = (seed >> 16) % 5 < 2 ? a : b;
        struct ledger_entry e = append(l, "k", -1, "{}");
        cr_assert_eq(e.seq, i);
    }
    struct ledger_verify_result r;
    cr_assert_eq(ledger_verify(a, 0, NULL, NULL, &r, &err), FO_OK);
    cr_assert(r.ok, "%s at %lld", r.reason, (long long)r.first_bad_seq);
    cr_assert_eq(r.entries, 300);
    ledger_close(a);
    ledger_close(b);
    tu_rmrf(dir);
}

/* The served form written directly must be byte for byte what the
 * canonical printer makes of the object form. */
Test(ledger_body, entry_text_is_the_canonical_served_form)
{
    static const char *const actors[] = {
        "a", "quote\"back\\slash", "ctl\x01\x1f tab\t", "\xc3\xa9t\xc3\xa9",
        "\xf0\x9f\x98\x80 \xe2\x80\xa8 del\x7f"};
    for (size_t i = 0; i < sizeof(actors) / sizeof(*actors); i++) {
        struct ledger_entry e;
        memset(&e, 0, sizeof(e));
        snprintf(e.actor, sizeof(e.actor), "%s", actors[i]);
        snprintf(e.kind, sizeof(e.kind), "kind.%zu-x_y", i);
        e.seq = (int64_t)(i * 1000003);
        e.ts = 1795000000000000 + (int64_t)i;
        e.parent = i % 2 ? LEDGER_NO_PARENT : (int64_t)i * 7;
        for (int k = 0; k < 32; k++) {
            e.payload[k] = (uint8_t)(k * 3 + i);
            e.prev[k] = (uint8_t)(255 - k);
            e.hash[k] = (uint8_t)(k ^ 0x5a);
        }
        struct fo_buf direct, canon;
        fo_buf_init(&direct, FO_BUF_UNLIMITED);
        fo_buf_init(&canon, FO_BUF_UNLIMITED);
        cr_assert_eq(ledger_entry_text(&e, &direct), 0);
        cJSON *j = ledger_entry_json(&e);
        cr_assert_not_null(j);
        struct fo_err err;
        cr_assert_eq(fo_json_canon(j, &canon, &err), FO_OK);
        cr_assert_eq(direct.len, canon.len, "actor %zu: %.*s vs %.*s", i,
                     (int)direct.len, direct.data, (int)canon.len, canon.data);
        cr_assert_eq(memcmp(direct.data, canon.data, canon.len), 0,
                     "actor %zu: %.*s vs %.*s", i, (int)direct.len, direct.data,
                     (int)canon.len, canon.data);
        cJSON_Delete(j);
        fo_buf_release(&direct);
        fo_buf_release(&canon);
    }
}

/* A second ledger_open inside a process must not drop the locks of the
 * process's first connection: if it did, another process closing the
 * ledger would think itself the last connection and reset the WAL under
 * the first, and appends the first acknowledged afterwards would be lost
 * at a crash. */
Test(ledger_procs, second_open_keeps_the_first_connections_locks)
{
    char *dir = tu_tmpdir();
    ledger_close(open_new(dir));
    int go[2], ready[2];
    cr_assert_eq(pipe(go), 0);
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        struct fo_err err;
        struct ledger *a = NULL, *b = NULL;
        char c;
        if (ledger_open(dir, 0, NULL, &a, &err) != FO_OK ||
            ledger_append(a, "t", "k", -1, "{}", 2, NULL, &err) != FO_OK ||
            ledger_open(dir, 0, NULL, &b, &err) != FO_OK)
            _exit(10);
        ledger_close(b);
        if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(11);
        for (int i = 0; i < 2; i++)
            if (ledger_append(a, "t", "k", -1, "{}", 2, NULL, &err) != FO_OK)
                _exit(12);
        _exit(0); /* no close: as a crash would leave it */
    }
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    /* another process opens and closes the ledger read-write */
    struct ledger *other = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, 0, NULL, &other, &err), FO_OK);
    ledger_close(other);
    cr_assert_eq(write(go[1], "g", 1), 1);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    cr_assert_eq(count(dir), 3, "appends acknowledged by the child were lost");
    cr_assert(verify(dir, 1).ok);
    close(go[0]);
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
    tu_rmrf(dir);
}

struct seqs {
    int64_t v[64];
    size_t n;
};

static int collect_seq(void *ctx, const struct ledger_entry *e)
{
    struct seqs *s = ctx;
    if (s->n < 64)
        s->v[s->n] = e->seq;
    s->n++;
    return FO_OK;
}

static int has_parent_index(const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ledger.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                 SQLITE_OK);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT count(*) FROM sqlite_master WHERE"
                                    " name = 'entries_parent'",
                                    -1, &q, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/* The entries under a root, with other roots' entries in between; the
 * same answer with the index dropped (an older ledger read read-only), and
 * the index made again by a read-write open. */
Test(ledger_body, descendants_of_a_root_skip_what_came_between)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    int64_t a = append(l, "request", -1, "{}").seq; /* 0 */
    int64_t b = append(l, "request", -1, "{}").seq; /* 1 */
    int64_t a1 = append(l, "plan", a, "{}").seq;    /* 2 */
    append(l, "plan", b, "{}");                     /* 3 */
    int64_t a2 = append(l, "task", a1, "{}").seq;   /* 4 */
    append(l, "note", -1, "{}");                    /* 5 */
    int64_t a3 = append(l, "result", a2, "{}").seq; /* 6 */
    int64_t a4 = append(l, "answer", a, "{}").seq;  /* 7 */
    append(l, "task", 3, "{}");                     /* 8 */
    const int64_t want[] = {a, a1, a2, a3, a4};
    cr_assert_eq(has_parent_index(dir), 1);
    for (int round = 0; round < 2; round++) {
        struct seqs s = {.n = 0};
        struct fo_err err;
        cr_assert_eq(ledger_descendants(l, a, -1, collect_seq, &s, &err), FO_OK,
                     "%s", err.msg);
        cr_assert_eq(s.n, 5, "round %d: %zu entries", round, s.n);
        for (size_t i = 0; i < 5; i++)
            cr_assert_eq(s.v[i], want[i], "round %d: [%zu] = %lld", round, i,
                         (long long)s.v[i]);
        s.n = 0;
        cr_assert_eq(ledger_descendants(l, a, 3, collect_seq, &s, &err), FO_OK);
        cr_assert_eq(s.n, 3);
        s.n = 0;
        cr_assert_eq(ledger_descendants(l, 5, -1, collect_seq, &s, &err),
                     FO_OK);
        cr_assert_eq(s.n, 1);
        if (round == 0) {
            ledger_close(l);
            sql(dir, "DROP INDEX entries_parent");
            cr_assert_eq(has_parent_index(dir), 0);
            cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &l, &err),
                         FO_OK);
        }
    }
    ledger_close(l);
    cr_assert_eq(has_parent_index(dir), 0, "a read-only open changed it");
    l = open_new(dir);
    ledger_close(l);
    cr_assert_eq(has_parent_index(dir), 1, "not made on a read-write open");
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

/* The head's root from a handle's head cache (a reader's too) is always the
 * root of the log as stored, whoever appended last. */
Test(ledger_tree, tree_head_follows_appends_of_other_handles)
{
    char *dir = tu_tmpdir();
    struct ledger *w = open_new(dir), *r = NULL;
    struct fo_err err;
    cr_assert_eq(ledger_open(dir, LEDGER_OPEN_READONLY, NULL, &r, &err), FO_OK);
    int64_t n = -1;
    uint8_t head[32], want[32];
    cr_assert_eq(ledger_tree_head(r, &n, head, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(n, 0);
    for (int round = 1; round <= 6; round++) {
        fill(w, round * 7);
        for (int k = 0; k < 2; k++) { /* the second from the cache */
            cr_assert_eq(ledger_tree_head(r, &n, head, &err), FO_OK);
            cr_assert_eq(ledger_root(w, n, want, &err), FO_OK);
            cr_assert_eq(memcmp(head, want, 32), 0, "round %d size %lld", round,
                         (long long)n);
        }
        /* and the writer's own head, after its appends */
        cr_assert_eq(ledger_tree_head(w, &n, head, &err), FO_OK);
        cr_assert_eq(memcmp(head, want, 32), 0);
    }
    cr_assert_eq(n, 7 * (1 + 2 + 3 + 4 + 5 + 6));
    ledger_close(r);
    ledger_close(w);
    cr_assert(verify(dir, 0).ok);
    tu_rmrf(dir);
}

/* ---- files moved under an open handle --------------------------------- */

static void path_of(char *out, size_t n, const char *dir, const char *name)
{
    cr_assert_lt((size_t)snprintf(out, n, "%s/%s", dir, name), n);
}

static off_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return st.st_size;
}

/* An append on a handle whose files are gone: refused with storage_moved,
 * naming the file, and refused again (sticky); nothing acknowledged. */
static void assert_refused(struct ledger *l, const char *file, const char *why)
{
    struct fo_err err;
    struct ledger_entry e = {.seq = -1};
    for (int i = 0; i < 2; i++) {
        fo_err_clear(&err);
        int rc = ledger_append(l, "t", "k", -1, "{\"x\":1}", 7, &e, &err);
        cr_assert_eq(rc, FO_E_STORAGE_MOVED, "append %d: rc %d (%s)", i, rc,
                     err.msg);
        cr_assert_eq(err.code, FO_E_STORAGE_MOVED);
        cr_assert(strstr(err.msg, file), "message names %s: %s", file, err.msg);
        cr_assert(strstr(err.msg, why), "message says %s: %s", why, err.msg);
        cr_assert_eq(e.seq, -1, "an entry came back");
    }
    cr_assert_eq(ledger_storage_check(l, &err), FO_E_STORAGE_MOVED);
    /* the other writes of the handle are refused too */
    cr_assert_eq(ledger_redact(l, 0, "r", NULL, &err), FO_E_STORAGE_MOVED);
    cr_assert_str_eq(fo_code_name(FO_E_STORAGE_MOVED), "storage_moved");
}

Test(ledger_storage, deleted_database_refuses_appends)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 3);
    struct fo_err err;
    cr_assert_eq(ledger_storage_check(l, &err), FO_OK, "%s", err.msg);
    char p[512];
    path_of(p, sizeof(p), dir, "ledger.db");
    cr_assert_eq(unlink(p), 0);
    assert_refused(l, "ledger.db", "deleted");
    /* reads go on, from the files the handle has: the first refused
     * append is in the deleted file (its commit ran before the check after
     * it saw the file gone), never acknowledged; the second never ran */
    int64_t n = -1;
    cr_assert_eq(ledger_count(l, &n, &err), FO_OK, "%s", err.msg);
    cr_assert_eq(n, 4);
    /* no new ledger is made beside the old WAL, before or after the lost
     * handle is closed (SQLite leaves the WAL of a moved file) */
    for (int i = 0; i < 2; i++) {
        struct ledger *again = NULL;
        cr_assert_eq(ledger_open(dir, LEDGER_OPEN_CREATE, NULL, &again, &err),
                     FO_E_CORRUPT, "round %d", i);
        cr_assert(strstr(err.msg, "missing, but its -wal is there"), "%s",
                  err.msg);
        if (i == 0) {
            ledger_close(l);
            l = NULL;
        }
    }
    /* with the WAL and wal-index moved away, a new ledger starts */
    static const char *const sides[] = {"ledger.db-wal", "ledger.db-shm"};
    for (int i = 0; i < 2; i++) {
        path_of(p, sizeof(p), dir, sides[i]);
        unlink(p);
    }
    l = open_new(dir);
    cr_assert_eq(append(l, "k", -1, "{}").seq, 0);
    ledger_close(l);
    tu_rmrf(dir);
}

Test(ledger_storage, database_renamed_over_refuses_appends)
{
    char *dir = tu_tmpdir(), *other = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 3);
    struct ledger *o = open_new(other);
    fill(o, 1);
    ledger_close(o); /* checkpointed: ledger.db alone holds it */
    char from[512], to[512];
    path_of(from, sizeof(from), other, "ledger.db");
    path_of(to, sizeof(to), dir, "ledger.db");
    cr_assert_eq(rename(from, to), 0);
    assert_refused(l, "ledger.db", "replaced");
    ledger_close(l);
    tu_rmrf(dir);
    tu_rmrf(other);
}

/* Moving the file back does not make a lost handle write again: what it
 * wrote meanwhile may be gone, and other processes may have taken over. */
Test(ledger_storage, lost_stays_lost_after_the_file_comes_back)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 2);
    char p[512], q[512];
    path_of(p, sizeof(p), dir, "ledger.db");
    path_of(q, sizeof(q), dir, "ledger.db.away");
    cr_assert_eq(rename(p, q), 0);
    struct fo_err err;
    cr_assert_eq(ledger_storage_check(l, &err), FO_E_STORAGE_MOVED);
    cr_assert(strstr(err.msg, "renamed away"), "%s", err.msg);
    cr_assert_eq(rename(q, p), 0);
    assert_refused(l, "ledger.db", "renamed away");
    ledger_close(l);
    /* a new handle writes on */
    l = open_new(dir);
    struct ledger_entry e = append(l, "k", -1, "{}");
    cr_assert_eq(e.seq, 2);
    ledger_close(l);
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

Test(ledger_storage, deleted_or_replaced_wal_and_shm_refuse_appends)
{
    static const char *const names[] = {"ledger.db-wal", "ledger.db-shm"};
    for (int i = 0; i < 2; i++) {
        for (int replace = 0; replace < 2; replace++) {
            char *dir = tu_tmpdir();
            struct ledger *l = open_new(dir);
            fill(l, 3);
            char p[512], q[512];
            path_of(p, sizeof(p), dir, names[i]);
            if (replace) { /* a copy renamed over it */
                path_of(q, sizeof(q), dir, "copy");
                size_t len = 0;
                char *data = tu_read_file(p, &len);
                cr_assert(data);
                cr_assert_eq(tu_write_file(q, data, len), 0);
                free(data);
                cr_assert_eq(rename(q, p), 0);
            } else {
                cr_assert_eq(unlink(p), 0);
            }
            assert_refused(l, names[i], replace ? "replaced" : "deleted");
            ledger_close(l);
            tu_rmrf(dir);
        }
    }
}

/* The WAL cut under the handle: at 0 bytes, inside its frames, and below
 * its header and then written past (what a commit racing the cut leaves);
 * and overwritten in place with another ledger's WAL of the same size. */
Test(ledger_storage, truncated_or_overwritten_wal_refuses_appends)
{
    for (int how = 0; how < 4; how++) {
        char *dir = tu_tmpdir();
        struct ledger *l = open_new(dir);
        fill(l, 5);
        char p[512];
        path_of(p, sizeof(p), dir, "ledger.db-wal");
        off_t size = file_size(p);
        cr_assert_gt(size, 4096, "the appends are in the WAL");
        const char *why = "truncated";
        if (how == 0) {
            cr_assert_eq(truncate(p, 0), 0);
        } else if (how == 1) {
            cr_assert_eq(truncate(p, size / 2), 0);
        } else if (how == 2) {
            cr_assert_eq(truncate(p, 16), 0);
            cr_assert_eq(truncate(p, size), 0); /* zeros from byte 16 */
            why = "overwritten";
        } else {
            /* the WAL of another ledger, written into this one's inode */
            char *other = tu_tmpdir();
            struct ledger *o = open_new(other);
            fill(o, 40);
            char op[512];
            path_of(op, sizeof(op), other, "ledger.db-wal");
            size_t len = 0;
            char *data = tu_read_file(op, &len);
            cr_assert(data && (off_t)len >= size);
            FILE *f = fopen(p, "r+b");
            cr_assert(f);
            cr_assert_eq(fwrite(data, 1, len, f), len);
            cr_assert_eq(fclose(f), 0);
            free(data);
            ledger_close(o);
            tu_rmrf(other);
            why = "overwritten";
        }
        cr_assert_eq(file_size(p) >= size, how >= 2);
        assert_refused(l, "ledger.db-wal", why);
        ledger_close(l);
        tu_rmrf(dir);
    }
}

/* What SQLite itself does to the WAL is never taken for damage: a
 * checkpoint that truncates it (a redaction, on another handle), restarts
 * after automatic checkpoints, two handles and another process taking
 * turns. */
Test(ledger_storage, checkpoints_and_other_writers_are_not_damage,
     .timeout = 120)
{
    char *dir = tu_tmpdir();
    struct ledger *a = open_new(dir), *b = open_new(dir);
    struct fo_err err;
    char body[2100];
    memset(body, 'x', sizeof(body));
    memcpy(body, "{\"pad\":\"", 8);
    memcpy(body + sizeof(body) - 2, "\"}", 2);
    for (int round = 0; round < 6; round++) {
        /* ~1.5 MB through the WAL per round: automatic checkpoints and WAL
         * restarts on both handles */
        for (int i = 0; i < 350; i++) {
            struct ledger *w = i % 3 ? a : b;
            cr_assert_eq(
                ledger_append(w, "t", "k", -1, body, sizeof(body), NULL, &err),
                FO_OK, "round %d append %d: %s", round, i, err.msg);
        }
        pid_t kid = fork();
        cr_assert_geq(kid, 0);
        if (kid == 0) {
            struct ledger *c = NULL;
            if (ledger_open(dir, 0, NULL, &c, &err) != FO_OK)
                _exit(10);
            for (int i = 0; i < 50; i++)
                if (ledger_append(c, "c", "k", -1, "{}", 2, NULL, &err))
                    _exit(11);
            ledger_close(c);
            _exit(0);
        }
        int st;
        cr_assert_eq(waitpid(kid, &st, 0), kid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d", st);
        /* a redaction on b truncates the WAL under a */
        int64_t n = 0;
        cr_assert_eq(ledger_count(a, &n, &err), FO_OK);
        cr_assert_eq(ledger_redact(b, n - 1, "r", NULL, &err), FO_OK, "%s",
                     err.msg);
        cr_assert_eq(ledger_storage_check(a, &err), FO_OK, "%s", err.msg);
        cr_assert_eq(ledger_append(a, "t", "k", -1, "{}", 2, NULL, &err), FO_OK,
                     "after the redaction: %s", err.msg);
        cr_assert_eq(ledger_storage_check(b, &err), FO_OK, "%s", err.msg);
    }
    ledger_close(a);
    ledger_close(b);
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

/* The check outside any transaction (what /health runs) while another
 * process appends, checkpoints and truncates the WAL: never damage. */
Test(ledger_storage, checks_beside_a_busy_writer_find_nothing, .timeout = 120)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    fill(l, 1);
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        struct ledger *w = NULL;
        struct fo_err err;
        char body[2100];
        memset(body, 'y', sizeof(body));
        memcpy(body, "{\"pad\":\"", 8);
        memcpy(body + sizeof(body) - 2, "\"}", 2);
        if (ledger_open(dir, 0, NULL, &w, &err) != FO_OK)
            _exit(10);
        for (int i = 0; i < 1500; i++) {
            struct ledger_entry e;
            if (ledger_append(w, "w", "k", -1, body, sizeof(body), &e, &err))
                _exit(11);
            if (i % 300 == 299 && ledger_redact(w, e.seq, "r", NULL, &err))
                _exit(12);
        }
        ledger_close(w);
        _exit(0);
    }
    struct fo_err err;
    long checks = 0;
    int st = 0;
    while (waitpid(kid, &st, WNOHANG) == 0) {
        cr_assert_eq(ledger_storage_check(l, &err), FO_OK, "check %ld: %s",
                     checks, err.msg);
        checks++;
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d", st);
    cr_assert_gt(checks, 100);
    cr_assert_eq(ledger_append(l, "t", "k", -1, "{}", 2, NULL, &err), FO_OK,
                 "%s", err.msg);
    ledger_close(l);
    cr_assert(verify(dir, 1).ok);
    tu_rmrf(dir);
}

/* Redaction holes (issue 18, defect 8): a redaction names every entry whose
 * body it removes (entries that share a payload share its body), and a
 * redaction entry, the record of one, cannot itself be redacted. */
Test(ledger, a_redaction_names_every_body_it_removes_and_stays)
{
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    append(l, "note", LEDGER_NO_PARENT, "{\"same\":1}");
    append(l, "note", LEDGER_NO_PARENT, "{\"same\":1}");
    append(l, "note", LEDGER_NO_PARENT, "{\"other\":1}");
    struct ledger_entry red;
    struct fo_err err;
    cr_assert_eq(ledger_redact(l, 0, "test", &red, &err), FO_OK, "%s", err.msg);
    char *body = NULL;
    size_t len = 0;
    cr_assert_eq(ledger_body(l, red.seq, &body, &len, &err), FO_OK);
    cr_assert(strstr(body, "\"seqs\":[0,1]"), "%s", body);
    free(body);
    cr_assert_eq(ledger_body(l, 1, &body, &len, &err), FO_E_REDACTED);
    cr_assert_eq(ledger_body(l, 2, &body, &len, &err), FO_OK);
    free(body);
    /* the record of a redaction cannot be redacted */
    cr_assert_eq(ledger_redact(l, red.seq, "hide it", NULL, &err),
                 FO_E_INVALID);
    cr_assert(strstr(err.msg, "cannot be redacted"), "%s", err.msg);
    cr_assert_eq(ledger_body(l, red.seq, &body, &len, &err), FO_OK);
    free(body);
    ledger_close(l);
    struct ledger_verify_result res = verify(dir, 1);
    cr_assert(res.ok);
    cr_assert_eq(res.bodies_redacted, 2); /* = the seqs the redaction names */
    tu_rmrf(dir);
}

/* ---- the owner of a handle ----------------------------------------------
 * A handle is used by one thread: the one that opened it, or the last to
 * call ledger_set_owner. The test builds (FORUM_OWNER_ASSERTS) abort on a
 * call from another, naming the function. */

struct owner_use {
    struct ledger *l;
    int take; /* call ledger_set_owner first */
    int rc;
};

static void *owner_use_main(void *arg)
{
    struct owner_use *u = arg;
    struct fo_err err;
    int64_t n = 0;
    if (u->take)
        ledger_set_owner(u->l);
    u->rc = ledger_count(u->l, &n, &err);
    return NULL;
}

/* In a child: opens dir's ledger, hands it to a second thread (which takes
 * it over when take) for one ledger_count, then uses it again on the
 * first thread (taking it back when take). Exits 0 when every call
 * returned. The child's stderr goes to errpath. */
static pid_t owner_child(const char *dir, const char *errpath, int take)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid != 0)
        return pid;
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (!freopen(errpath, "w", stderr))
        _exit(10);
    struct ledger *l = NULL;
    struct fo_err err;
    if (ledger_open(dir, 0, NULL, &l, &err) != FO_OK)
        _exit(11);
    struct owner_use u = {.l = l, .take = take, .rc = -1};
    pthread_t th;
    if (pthread_create(&th, NULL, owner_use_main, &u) != 0)
        _exit(12);
    pthread_join(th, NULL);
    if (u.rc != FO_OK)
        _exit(13);
    if (take)
        ledger_set_owner(l); /* handed back: the join ordered it */
    int64_t n = 0;
    if (ledger_count(l, &n, &err) != FO_OK || n != 1)
        _exit(14);
    ledger_close(l);
    _exit(0);
}

Test(ledger_owner, a_call_from_a_thread_not_the_owner_aborts_naming_it)
{
#ifndef FORUM_OWNER_ASSERTS
    cr_skip_test("built without FORUM_OWNER_ASSERTS");
#endif
    char *dir = tu_tmpdir();
    struct ledger *l = open_new(dir);
    append(l, "note", LEDGER_NO_PARENT, "{}");
    ledger_close(l);
    char errpath[512];
    snprintf(errpath, sizeof(errpath), "%s/child.err", dir);
    int st = 0;
    pid_t pid = owner_child(dir, errpath, 0);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    char *msg = tu_read_file(errpath, NULL);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "the child was not aborted (status %#x): %s", st, msg ? msg : "");
    cr_assert(msg && strstr(msg, "ledger_count: ledger handle") &&
                  strstr(msg, "does not own it"),
              "%s", msg ? msg : "(no stderr)");
    free(msg);
    /* the same use, stated: ledger_set_owner on each side of the join */
    pid = owner_child(dir, errpath, 1);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    msg = tu_read_file(errpath, NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x: %s", st,
              msg ? msg : "");
    free(msg);
    tu_rmrf(dir);
}
